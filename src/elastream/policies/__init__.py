"""Scheduling policies: small plug-ins registered by name (C-Stream §3.2.6).

``available()`` lists them; ``create(name)`` instantiates one.
"""

from elastream.policies.base import BasePolicy, SchedulingPolicy, TaskView
from elastream.policies.registry import available, create, register

__all__ = ["BasePolicy", "SchedulingPolicy", "TaskView", "available", "create", "register"]
