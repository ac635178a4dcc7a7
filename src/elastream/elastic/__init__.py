"""Elasticity: controllers that size a running flow's threads, processes and replicas from its statistics.

Controllers read the per-period statistics snapshot and return frozen
decisions with their reasons (C-Stream §4, IBM Streams §4.2, DS2); the elastic
loop (:mod:`elastream.elastic.loop`) applies them at the run's one
reconfiguration point. Nothing here touches a running flow.

Modules: :mod:`~elastream.elastic.controller` (the protocol, the Machine view,
the registry), :mod:`~elastream.elastic.view` (a period folded into the
operators the user wrote), :mod:`~elastream.elastic.utilization` (C-Stream
§4.1), :mod:`~elastream.elastic.trend` (IBM §4.2), :mod:`~elastream.elastic.gil`
(GIL-awareness for both), :mod:`~elastream.elastic.bottleneck` (Algorithm 9),
:mod:`~elastream.elastic.ds2` (one-step replica sizing),
:mod:`~elastream.elastic.hotkeys` and :mod:`~elastream.elastic.combined`
("auto": a thread controller beside DS2).

Threading: controllers are used from the elastic loop's thread only.
"""

from __future__ import annotations

from elastream.elastic.controller import CONTROLLERS, Controller, Machine, create_controller, register_controller

__all__ = ["CONTROLLERS", "Controller", "Machine", "create_controller", "register_controller"]
