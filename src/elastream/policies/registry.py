"""Policy registry: policies are chosen by name.

Example::

    @register("fifo")
    class Fifo(BasePolicy):
        def pick(self, ready, now):
            return next(iter(ready))
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

_REGISTRY: dict[str, type] = {}
_BUILTIN_MODULES = ("random", "max_queue", "min_latency", "least_recently_run",
                    "max_running_time", "max_tuple_wait", "qst", "lp", "et", "ct", "ibm",
                    "haren")


def register(name: str) -> Callable[[type], type]:
    """Class decorator registering a policy under ``name``."""

    def deco(cls: type) -> type:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"policy {name!r} is already registered")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return deco


def _load_builtins() -> None:
    for mod in _BUILTIN_MODULES:
        importlib.import_module(f"elastream.policies.{mod}")


def available() -> list[str]:
    """Names of every registered policy, sorted."""
    _load_builtins()
    return sorted(_REGISTRY)


def create(name_or_policy: Any, *, seed: int | None = None) -> Any:
    """A policy instance from a registered name (or an instance, returned as is)."""
    if not isinstance(name_or_policy, str):
        return name_or_policy
    return policy_class(name_or_policy)(seed=seed)


def policy_class(name: str) -> type:
    """The class registered under ``name`` (what a run reads before it creates the policy)."""
    _load_builtins()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; available: {', '.join(available())}") from None
