"""Elasticity: controllers that size a running flow's threads, processes and replicas from its statistics.

Controllers read the per-period statistics snapshot and return frozen
decisions with their reasons (C-Stream §4, IBM Streams §4.2, DS2); the elastic
loop (:mod:`elastream.elastic.loop`) applies them at the run's one
reconfiguration point. Nothing here touches a running flow.

Threading: controllers are used from the elastic loop's thread only.
"""

from __future__ import annotations

from elastream.elastic.controller import CONTROLLERS, Controller, Machine, create_controller, register_controller

__all__ = ["CONTROLLERS", "Controller", "Machine", "create_controller", "register_controller"]
