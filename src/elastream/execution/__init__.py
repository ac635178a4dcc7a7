"""The execution facade: ``es.Runner`` picks a backend (threads, worker processes, Spark) for a flow.

The top of the engine's layers: it imports the runtime mechanism and every
backend; nothing below imports it.
"""

from elastream.execution.backends import BACKENDS, register_backend
from elastream.execution.runner import Runner

__all__ = ["BACKENDS", "Runner", "register_backend"]
