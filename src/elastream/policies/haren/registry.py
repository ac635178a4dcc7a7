"""Haren policies by name: ``register_haren("fcfs", g=..., features=...)`` makes ``policy="haren:fcfs"``.

Each registered spec becomes a :class:`~elastream.policies.haren.policy.HarenPolicy` subclass in the
engine's policy registry (:mod:`elastream.policies.registry`) under ``haren:<name>``, so it is chosen,
listed and checked like every other policy.

Example::

    register_haren("newest_first", g=lambda op, F: (-F["head_clock_time"][op.index],),
                   features=("head_clock_time",))
    es.Runner(threads=2, policy="haren:newest_first").run(flow)
"""

from __future__ import annotations

from typing import Any

from elastream.policies.haren.policy import HarenPolicy
from elastream.policies.haren.spec import HarenSpec, assign_random
from elastream.policies.registry import register

PREFIX = "haren:"
_SPECS: dict[str, HarenSpec] = {}


def register_haren(name: str, g: Any, features: tuple[str, ...] | list[str], f: Any = assign_random,
                   **parameters: Any) -> type[HarenPolicy]:
    """Register the Haren policy ``haren:<name>`` (``g``, ``f``, the features they read, and P, b, d as
    ``period_s``, ``batch_size``, ``delay_s``); returns its policy class."""
    spec = HarenSpec(name=name, g=g, f=f, features=tuple(features), **parameters)
    return register_spec(spec)


def register_spec(spec: HarenSpec) -> type[HarenPolicy]:
    """Register ``spec`` as ``haren:<spec.name>``; returns its policy class."""
    cls = type(f"Haren_{spec.name}", (HarenPolicy,), {"spec": spec, "__doc__": spec.description or None})
    register(PREFIX + spec.name)(cls)
    _SPECS[spec.name] = spec
    return cls


def haren_spec(name: str) -> HarenSpec:
    """The spec registered as ``name`` (with or without the ``haren:`` prefix)."""
    key = name[len(PREFIX):] if name.startswith(PREFIX) else name
    try:
        return _SPECS[key]
    except KeyError:
        raise ValueError(f"unknown Haren policy {name!r}; known: {', '.join(sorted(_SPECS))}") from None


def policy_for(spec: HarenSpec, seed: int | None = None) -> HarenPolicy:
    """An unregistered policy instance running ``spec`` (a benchmark's variant of P, b or d)."""
    cls = type(f"Haren_{spec.name}", (HarenPolicy,), {"spec": spec, "name": PREFIX + spec.name})
    return cls(seed=seed)
