"""Haren (Palyvos-Giannas et al., DEBS 2019): scheduling policies as two small functions over features.

A policy is an inter-thread function ``f(op, features) -> worker`` and an intra-thread function
``g(op, features) -> priority vector``, recomputed once per scheduling period by the workers
themselves (the scheduling task T_S), while each worker runs its own sorted list in between (the
execution task T_E). See docs/haren.md for how it works inside.

* :mod:`.spec` — the policy record (f, g, features, P, b, d); :mod:`.registry` — ``haren:<name>``;
* :mod:`.features` — the features and their kinds (Table 1); :mod:`.operators` — queries and classes;
* :mod:`.execution_task`, :mod:`.scheduling_task`, :mod:`.barrier`, :mod:`.state` — T_E and T_S;
* :mod:`.fcfs`, :mod:`.hr`, :mod:`.chain`, :mod:`.multiclass` — the policies of §7.2 and §7.4.

Example::

    es.Runner(threads=2, policy="haren:fcfs").run(flow)
"""

from elastream.policies.haren import chain, fcfs, hr, multiclass  # noqa: F401 - register the built-ins
from elastream.policies.haren.features import Feature, FeatureTable, register_feature
from elastream.policies.haren.operators import OperatorView
from elastream.policies.haren.policy import HarenPolicy
from elastream.policies.haren.registry import haren_spec, policy_for, register_haren, register_spec
from elastream.policies.haren.spec import HarenSpec, with_parameters
from elastream.policies.haren.state import HarenStats

BUILTIN = ("haren:fcfs", "haren:hr", "haren:chain", "haren:multiclass")

__all__ = ["BUILTIN", "Feature", "FeatureTable", "HarenPolicy", "HarenSpec", "HarenStats", "OperatorView",
           "haren_spec", "policy_for", "register_feature", "register_haren", "register_spec", "with_parameters"]
