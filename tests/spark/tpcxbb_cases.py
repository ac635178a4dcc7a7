"""Query parameters shared by the Spark suites: one set per query with a non-trivial answer at scale 0.01.

A plain module (not conftest.py, whose name two suites share) imported as ``from tpcxbb_cases import CASES``.
"""

from __future__ import annotations

from elastream.tpcxbb.params import Q01Params, Q02Params, Q03Params, Q04Params, Q15Params

#: Q1's defaults find no pair at scale 0.01; Q15's store 10 has too few sales there.
CASES = {
    "q01": Q01Params(viewed_together_count=1, stores=tuple(range(11))),
    "q02": Q02Params(),
    "q03": Q03Params(),
    "q04": Q04Params(),
    "q15": Q15Params(start_date="2001-01-01", end_date="2006-01-02", store_sk=3),
}
