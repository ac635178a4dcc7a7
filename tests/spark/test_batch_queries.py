"""Spark batch answers of Q1, Q2, Q3, Q4 and Q15 (spec §4, §6).

Three kinds of checks:

* on the generated scale-0.01 data set, each answer has the §4 columns and
  equals an independent plain-Python scan written from the §4 prose (the
  kit's map-reduce scripts' form: per-user sorted walks, a last-N buffer);
* hand-made tiny tables for the edge cases the spec calls out, against values
  worked out by hand in each test;
* malformed input fails before Spark runs, naming table, column and file.
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections import Counter, defaultdict, deque
from fractions import Fraction

import pyarrow.parquet as pq
import pytest

from elastream.spark.batch import run_batch, run_batch_query
from elastream.tpcxbb import io
from elastream.tpcxbb.answers import answer_difference, answer_schema
from elastream.tpcxbb.io import TpcxbbDataError
from elastream.tpcxbb.params import Q01Params, Q02Params, Q03Params, Q04Params, Q15Params

pytestmark = [pytest.mark.timeout(300), pytest.mark.spark]

DAY = 86_400


def _rows(data, name):
    return io.read_table(data, name).to_pylist()


def _ts(row, date, time):
    return row[date] * DAY + row[time]


# -- independent oracles (plain Python, spec §4 prose) -----------------------------------------------------------


def oracle_q01(data, p: Q01Params):
    cats = {r["i_item_sk"] for r in _rows(data, "item") if r["i_category_id"] in p.categories}
    baskets = defaultdict(set)
    for r in _rows(data, "store_sales"):
        if r["ss_store_sk"] in p.stores and r["ss_item_sk"] in cats:
            window = _ts(r, "ss_sold_date_sk", "ss_sold_time_sk") // p.window_s * p.window_s if p.window_s else 0
            baskets[(r["ss_ticket_number"], window)].add(r["ss_item_sk"])
    counts = Counter()
    for (_, window), items in baskets.items():
        for a, b in itertools.combinations(sorted(items), 2):
            counts[(window, a, b)] += 1
    kept = sorted(((w, a, b, c) for (w, a, b), c in counts.items() if c > p.viewed_together_count),
                  key=lambda r: (r[0], -r[3], r[1], r[2]))
    out = []
    for _, group in itertools.groupby(kept, key=lambda r: r[0]):
        out.extend(list(group)[:p.limit])
    if p.window_s:
        return [{"window_start": w, "item_sk_1": a, "item_sk_2": b, "cnt": c} for w, a, b, c in out]
    return [{"item_sk_1": a, "item_sk_2": b, "cnt": c} for _, a, b, c in out]


def _clicks_by_user(data, predicate):
    users = defaultdict(list)
    for r in _rows(data, "web_clickstreams"):
        if predicate(r):
            users[r["wcs_user_sk"]].append(r)
    return users


def _sessions(clicks, timeout):
    """Split clicks sorted by tstamp into sessions: a gap > timeout opens a new one."""
    sessions, last = [], None
    for c in clicks:
        if last is None or c["ts"] - last > timeout:
            sessions.append([])
        sessions[-1].append(c)
        last = c["ts"]
    return sessions


def oracle_q02(data, p: Q02Params):
    users = _clicks_by_user(data, lambda r: r["wcs_user_sk"] is not None and r["wcs_item_sk"] is not None)
    counts = Counter()
    for clicks in users.values():
        for c in clicks:
            c["ts"] = _ts(c, "wcs_click_date_sk", "wcs_click_time_sk")
        for session in _sessions(sorted(clicks, key=lambda c: c["ts"]), p.session_timeout_s):
            items = {c["wcs_item_sk"] for c in session}
            if p.item_sk in items:
                counts.update(items - {p.item_sk})
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:p.limit]
    return [{"item_sk_1": i, "item_sk_2": p.item_sk, "cnt": c} for i, c in top]


def oracle_q03(data, p: Q03Params):
    cats = {r["i_item_sk"] for r in _rows(data, "item") if r["i_category_id"] in p.categories}
    users = _clicks_by_user(data, lambda r: r["wcs_user_sk"] is not None and r["wcs_item_sk"] is not None)
    counts = Counter()
    for clicks in users.values():
        for c in clicks:
            c["ts"] = _ts(c, "wcs_click_date_sk", "wcs_click_time_sk")
        order = sorted(clicks, key=lambda c: (c["ts"], c["wcs_sales_sk"] is not None, c["wcs_sales_sk"] or 0,
                                              c["wcs_item_sk"]))
        buffer = deque(maxlen=p.views_before_purchase)
        for c in order:
            if c["wcs_item_sk"] in p.purchased_items and c["wcs_sales_sk"] is not None:
                for item, ts in buffer:
                    if ts >= c["ts"] - p.days_in_sec_before_purchase and item in cats:
                        counts[(c["wcs_item_sk"], item)] += 1
            buffer.append((c["wcs_item_sk"], c["ts"]))
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:p.limit]
    return [{"purchased_item": a, "lastviewed_item": b, "cnt": c} for (a, b), c in top]


def oracle_q04(data, p: Q04Params):
    types = {r["wp_web_page_sk"]: r["wp_type"] for r in _rows(data, "web_page")}
    users = _clicks_by_user(data, lambda r: r["wcs_user_sk"] is not None and r["wcs_web_page_sk"] in types
                            and r["wcs_sales_sk"] is None)
    pages, sessions = 0, 0
    for clicks in users.values():
        for c in clicks:
            c["ts"] = _ts(c, "wcs_click_date_sk", "wcs_click_time_sk")
        ordered = sorted(clicks, key=lambda c: (c["ts"], types[c["wcs_web_page_sk"]]))
        for session in _sessions(ordered, p.session_timeout_s):
            # K's scan: the session is abandoned when its last cart row comes after its last checkout row.
            last = {}
            for i, c in enumerate(session):
                last[types[c["wcs_web_page_sk"]]] = i
            cart, checkout = last.get(p.cart_page_type), last.get(p.checkout_page_type)
            if cart is not None and (checkout is None or cart > checkout):
                pages += len(session)
                sessions += 1
    return [{"avg_pages": pages / sessions if sessions else None}]


def oracle_q15(data, p: Q15Params):
    days = {r["d_date_sk"] for r in _rows(data, "date_dim") if p.start_date <= r["d_date"] <= p.end_date}
    cats = {r["i_item_sk"]: r["i_category_id"] for r in _rows(data, "item") if r["i_category_id"] is not None}
    daily = defaultdict(lambda: defaultdict(Fraction))
    for r in _rows(data, "store_sales"):
        if r["ss_store_sk"] == p.store_sk and r["ss_sold_date_sk"] in days and r["ss_item_sk"] in cats \
                and r["ss_net_paid"] is not None:
            daily[cats[r["ss_item_sk"]]][r["ss_sold_date_sk"]] += Fraction(r["ss_net_paid"])
    out = []
    for cat in sorted(daily):
        points = daily[cat].items()
        n = len(points)
        sx, sy = sum(x for x, _ in points), sum(y for _, y in points)
        sxx, sxy = sum(x * x for x, _ in points), sum(x * y for x, y in points)
        den = n * sxx - sx * sx
        if den == 0:
            continue
        slope = (n * sxy - sx * sy) / den
        if slope <= 0:
            out.append({"cat": cat, "slope": float(slope), "intercept": float((sy - slope * sx) / n)})
    return out


# -- generated data: columns and agreement with the oracles --------------------------------------------------------

CASES = [
    ("q01", Q01Params(viewed_together_count=1, stores=tuple(range(11))), oracle_q01),
    ("q01", Q01Params(viewed_together_count=0, stores=tuple(range(11)), window_s=30 * DAY, limit=3), oracle_q01),
    ("q02", Q02Params(), oracle_q02),
    ("q02", Q02Params(item_sk=10000, session_timeout_s=600, limit=10), oracle_q02),
    ("q03", Q03Params(), oracle_q03),
    ("q03", Q03Params(views_before_purchase=2, categories=(1, 2, 3, 8), limit=20), oracle_q03),
    ("q04", Q04Params(), oracle_q04),
    ("q15", Q15Params(), oracle_q15),
    ("q15", Q15Params(start_date="2001-01-01", end_date="2006-01-02", store_sk=3), oracle_q15),
]


@pytest.mark.parametrize(("query", "params", "oracle"), CASES, ids=[f"{q}-{i}" for i, (q, _, _) in enumerate(CASES)])
def test_generated_data_answer_equals_the_python_scan(spark, tpcxbb_data, query, params, oracle):
    answer = run_batch_query(query, tpcxbb_data, params, spark)
    assert answer.schema == answer_schema(query, windowed=bool(getattr(params, "window_s", None)))
    expected = oracle(tpcxbb_data, params)
    assert len(expected) > 0
    import pyarrow as pa

    difference = answer_difference(query, pa.Table.from_pylist(expected, schema=answer.schema), answer)
    assert difference is None, difference


def test_default_answers_have_the_spec_columns_and_limits(spark, tpcxbb_data):
    for query in ("q01", "q02", "q03", "q04", "q15"):
        run = run_batch(query, tpcxbb_data, None, spark)
        assert run.answer.schema == answer_schema(query)
        assert run.engine == "spark-batch" and run.seconds > 0 and run.tuples_per_second > 0
        assert run.input_rows == io.row_count(tpcxbb_data, "store_sales" if query in ("q01", "q15")
                                              else "web_clickstreams")
        assert run.summary()["latency_ms"] == {"p50": None, "p99": None}
    assert run_batch_query("q02", tpcxbb_data, None, spark).num_rows == 30  # §3 q02_limit
    assert run_batch_query("q04", tpcxbb_data, None, spark).num_rows == 1


# -- hand-made edge cases ------------------------------------------------------------------------------------------

D0 = 37_000  # an arbitrary date key


def _click(user, day, second, item, page=1, sales=None):
    return {"wcs_click_date_sk": day, "wcs_click_time_sk": second, "wcs_sales_sk": sales, "wcs_item_sk": item,
            "wcs_web_page_sk": page, "wcs_user_sk": user}


def test_q02_a_gap_of_exactly_3600_s_stays_in_the_session(spark, write_tables):
    data = write_tables(web_clickstreams=[
        # user 1: 10001, then item 5 exactly 3600 s later (same session), item 6 one second further (new session)
        _click(1, D0, 1000, 10001), _click(1, D0, 4600, 5), _click(1, D0, 4600, 5), _click(1, D0, 8201, 6),
        # user 2: a session across midnight (gap 600 s through the date key) holds 10001 and 5 and 7
        _click(2, D0, 86_000, 5), _click(2, D0 + 1, 200, 10001), _click(2, D0 + 1, 300, 7),
        # user 3: 7 a second too late
        _click(3, D0, 0, 10001), _click(3, D0, 3601, 7),
        # NULL user or item: dropped
        _click(None, D0, 10, 10001), _click(None, D0, 11, 9), _click(4, D0, 0, None), _click(4, D0, 1, 10001),
    ])
    answer = run_batch_query("q02", data, Q02Params(), spark).to_pylist()
    assert answer == [{"item_sk_1": 5, "item_sk_2": 10001, "cnt": 2}, {"item_sk_1": 7, "item_sk_2": 10001, "cnt": 1}]


def test_q03_equal_timestamps_order_null_sales_first_then_item(spark, write_tables):
    T = 50_000  # a second of the day
    item = [{"i_item_sk": i, "i_category_id": 2} for i in (3, 8, 21, 22, 23, 24, 25, 26, 10001)]
    item.append({"i_item_sk": 27, "i_category_id": 9})
    clicks = [
        # user 1: views 21..24, then in one second a plain view of 8 and order 99 with items 10001 and 3.
        # Order (ts, sales NULLS FIRST, item): 8, 3, 10001 → the last 5 before 10001 are 22, 23, 24, 8, 3.
        *[_click(1, 10, T - 100 + k, 21 + k) for k in range(4)],
        _click(1, 10, T, 10001, sales=99), _click(1, 10, T, 3, sales=99), _click(1, 10, T, 8),
        # user 2: 26 one second outside the 10-day window, 25 exactly on its edge, 27 of category 9
        _click(2, 10, T - 1, 26), _click(2, 10, T, 25),  # 10 days + 1 s and exactly 10 days before
        _click(2, 20, T - 5, 27), _click(2, 20, T, 10001, sales=100),
        # user 3: two purchases of 10001; the second sees the first
        _click(3, 30, 100, 10001, sales=101), _click(3, 30, 200, 10001, sales=102),
        # user 4: one order with two lines of 10001 after a view of 22: each line emits
        _click(4, 40, 99, 22), _click(4, 40, 100, 10001, sales=103), _click(4, 40, 100, 10001, sales=103),
        # a view of 10001 without a sale emits nothing
        _click(5, 40, 1, 22), _click(5, 40, 2, 10001),
    ]
    data = write_tables(web_clickstreams=clicks, item=item)
    answer = run_batch_query("q03", data, Q03Params(), spark).to_pylist()
    expected = [(22, 3), (10001, 2), (3, 1), (8, 1), (23, 1), (24, 1), (25, 1)]
    assert answer == [{"purchased_item": 10001, "lastviewed_item": v, "cnt": c} for v, c in expected]
    assert answer == oracle_q03(data, Q03Params())


def test_q04_dynamic_and_order_in_the_same_second_is_not_abandoned(spark, write_tables):
    pages = [{"wp_web_page_sk": 1, "wp_type": "dynamic"}, {"wp_web_page_sk": 2, "wp_type": "order"},
             {"wp_web_page_sk": 3, "wp_type": "general"}]
    D, O, G = 1, 2, 3
    clicks = [
        # user 1, session A: cart and checkout in the same second: the checkout wins (not abandoned, 3 pages)
        _click(1, D0, 0, 1, G), _click(1, D0, 10, 1, D), _click(1, D0, 10, 1, O),
        # user 1, session B: checkout, then cart (abandoned, 3 pages)
        _click(1, D0, 10_000, 1, O), _click(1, D0, 10_005, 1, D), _click(1, D0, 10_006, 1, G),
        # user 2: cart only (abandoned, 1 page); its click on an unknown page is dropped by the join
        _click(2, D0, 0, 1, D), _click(2, D0, 5, 1, 99),
        # user 3: cart, checkout, then a *purchase* click on a cart page: dropped before sessionization
        _click(3, D0, 0, 1, D), _click(3, D0, 1, 1, O), _click(3, D0, 2, 1, D, sales=7),
        # user 4: cart and a page exactly 3600 s later: one session of 2 pages (abandoned)
        _click(4, D0, 0, 1, D), _click(4, D0, 3600, 1, G),
        # user 5: no cart (not counted); NULL user and NULL page: dropped
        _click(5, D0, 0, 1, G), _click(None, D0, 0, 1, D), _click(6, D0, 0, 1, None),
    ]
    data = write_tables(web_clickstreams=clicks, web_page=pages)
    answer = run_batch_query("q04", data, Q04Params(), spark).to_pylist()
    assert answer == [{"avg_pages": (3 + 1 + 2) / 3}]
    assert answer == oracle_q04(data, Q04Params())


def _date_dim(first: int, last: int) -> list[dict]:
    base = dt.date(1900, 1, 1)
    return [{"d_date_sk": d, "d_date": (base + dt.timedelta(days=d)).isoformat()} for d in range(first, last + 1)]


def _sale(day, item, paid, store=10, ticket=1):
    return {"ss_sold_date_sk": day, "ss_sold_time_sk": 0, "ss_item_sk": item, "ss_store_sk": store,
            "ss_ticket_number": ticket, "ss_net_paid": paid}


def test_q15_days_without_sales_are_not_zeros(spark, write_tables):
    from decimal import Decimal as M

    start = 37_134  # 2001-09-02
    sales = [
        # category 1: y = 10 (6 + 4) on day 0, 8 on day 1, 2 on day 4; days 2 and 3 have no point.
        # Least squares over (0,10), (1,8), (4,2): slope -2, intercept 10 + 2·37134 = 74278.
        _sale(start, 1, M("6.00")), _sale(start, 1, M("4.00")), _sale(start + 1, 1, M("8.00")),
        _sale(start + 4, 1, M("2.00")),
        _sale(start + 2, 1, M("50.00"), store=11),  # another store
        _sale(start - 1, 1, M("90.00")),  # the day before the range
        # category 2 rises (slope > 0, not kept); category 3 has one day (no slope, not kept)
        _sale(start, 2, M("1.00")), _sale(start + 6, 2, M("5.00")), _sale(start, 3, M("1.00")),
        _sale(start, 4, M("1.00")),  # item 4 has a NULL category
    ]
    item = [{"i_item_sk": 1, "i_category_id": 1}, {"i_item_sk": 2, "i_category_id": 2},
            {"i_item_sk": 3, "i_category_id": 3}, {"i_item_sk": 4, "i_category_id": None}]
    data = write_tables(store_sales=sales, item=item, date_dim=_date_dim(start - 10, start + 400))
    answer = run_batch_query("q15", data, Q15Params(), spark).to_pylist()
    assert answer == [{"cat": 1, "slope": pytest.approx(-2.0, abs=1e-9),
                       "intercept": pytest.approx(74_278.0, rel=1e-12)}]


def test_q01_duplicate_items_in_a_ticket_count_once(spark, write_tables):
    from decimal import Decimal as M

    def line(ticket, item, store=10, hour=0):
        return {"ss_sold_date_sk": D0, "ss_sold_time_sk": hour * 3600 + 5, "ss_item_sk": item, "ss_store_sk": store,
                "ss_ticket_number": ticket, "ss_net_paid": M("1.00")}

    sales = [line(1, 1), line(1, 2), line(1, 2), line(1, 3),  # basket {1, 2, 3}: item 2 twice
             line(2, 1, hour=1), line(2, 2, hour=1),  # basket {1, 2}, an hour later
             line(3, 2), line(3, 2),  # basket {2}: no self-pair
             line(4, 1, store=11), line(4, 2, store=11),  # a store not in the list
             line(5, 1), line(5, 4)]  # item 4 is not in categories 1-3
    item = [{"i_item_sk": i, "i_category_id": c} for i, c in ((1, 1), (2, 2), (3, 3), (4, 9))]
    data = write_tables(store_sales=sales, item=item)
    answer = run_batch_query("q01", data, Q01Params(viewed_together_count=0), spark).to_pylist()
    assert answer == [{"item_sk_1": 1, "item_sk_2": 2, "cnt": 2}, {"item_sk_1": 1, "item_sk_2": 3, "cnt": 1},
                      {"item_sk_1": 2, "item_sk_2": 3, "cnt": 1}]
    assert run_batch_query("q01", data, Q01Params(viewed_together_count=1), spark).to_pylist() == \
        [{"item_sk_1": 1, "item_sk_2": 2, "cnt": 2}]  # strictly greater than the threshold
    hourly = run_batch_query("q01", data, Q01Params(viewed_together_count=0, window_s=3600, limit=2), spark)
    h0 = D0 * DAY
    assert hourly.to_pylist() == [
        {"window_start": h0, "item_sk_1": 1, "item_sk_2": 2, "cnt": 1},
        {"window_start": h0, "item_sk_1": 1, "item_sk_2": 3, "cnt": 1},
        {"window_start": h0 + 3600, "item_sk_1": 1, "item_sk_2": 2, "cnt": 1}]


# -- malformed input -----------------------------------------------------------------------------------------------


def test_a_wrong_type_fails_before_spark_runs_naming_table_column_and_file(spark, write_tables):
    import pyarrow as pa

    data = write_tables(item=[{"i_item_sk": 1, "i_category_id": 1}],
                        web_clickstreams=[_click(1, D0, 0, 10001)])
    bad = data / "web_clickstreams" / "part-00001.parquet"
    pq.write_table(pa.table({"wcs_click_date_sk": ["x"], "wcs_click_time_sk": [0], "wcs_sales_sk": [None],
                             "wcs_item_sk": [1], "wcs_web_page_sk": [1], "wcs_user_sk": [1]}), bad)
    with pytest.raises(TpcxbbDataError) as info:
        run_batch_query("q03", data, None, spark)
    err = info.value
    assert (err.table, err.column, err.file) == ("web_clickstreams", "wcs_click_date_sk", str(bad))
    assert "web_clickstreams" in str(err) and "wcs_click_date_sk" in str(err) and str(bad) in str(err)


def test_a_missing_table_or_column_fails_naming_it(spark, write_tables):
    data = write_tables(web_clickstreams=[_click(1, D0, 0, 10001)])
    with pytest.raises(TpcxbbDataError, match="table 'web_page' not found"):
        run_batch_query("q04", data, None, spark)
    (data / "web_page").mkdir()
    pq.write_table(__import__("pyarrow").table({"wp_web_page_sk": [1]}), data / "web_page" / "p.parquet")
    with pytest.raises(TpcxbbDataError, match="column 'wp_type'") as info:
        run_batch_query("q04", data, None, spark)
    assert info.value.file.endswith("p.parquet")


def test_parameters_of_the_wrong_query_are_refused(spark, tpcxbb_data):
    with pytest.raises(TypeError, match="Q02Params"):
        run_batch_query("q02", tpcxbb_data, Q03Params(), spark)
    with pytest.raises(KeyError, match="unknown query"):
        run_batch_query("q99", tpcxbb_data, None, spark)
