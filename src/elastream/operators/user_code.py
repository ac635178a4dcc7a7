"""Checks and explanations for the user code an operator runs: misuse fails at once, with a way out.

Three moments:

* **build time** — :func:`check_operator` is called by ``Flow.add`` on every
  operator (was ``super().__init__()`` called? is ``process`` an ``async def``?)
  and :func:`check_factory` by the operators that take a state or
  ``initial`` *factory*;
* **the first record** — the keyed and stateful operators check what a step
  returned (:func:`step_result_problem`, :func:`refuse_text_outputs`);
* **a failing user function** — the operators catch the exception once around
  their loop (nothing per tuple on the success path) and add a note naming the
  operator and the record it failed on (:func:`note_failed_record`), plus a
  hint where the mistake is a known one (:func:`note_fold_hint`).

Everything here is plain functions of the operator and the values at hand; it
runs in whatever thread runs the operator and keeps no state.

Example::

    try:
        out = list(map(fn, it := iter(items)))
    except Exception as exc:
        note_failed_record(exc, "Map(parse)", failed_record(items, it))
        raise
"""

from __future__ import annotations

import inspect
import reprlib
from collections.abc import Iterator
from typing import Any

from elastream.operators.base import Operator
from elastream.operators.spec import Driver

__all__ = ["NOTE_PREFIX", "TEXT_CLASSES", "TEXT_TYPES", "UNSET", "check_factory", "check_operator", "explain_step_failure",
           "failed_record", "note_failed_record", "note_fold_hint", "refuse_text_outputs", "shorten",
           "step_result_problem", "push_not_awaited", "foreign_await", "explain_asyncio"]

#: Every note elastream adds to a user's exception starts so (and is added once).
NOTE_PREFIX = "elastream: "
#: Outputs a step must not return as its iterable: iterating them emits characters (or ints).
TEXT_TYPES = (str, bytes, bytearray)
#: The same as a set, for the per-output check ``outputs.__class__ in TEXT_CLASSES`` (one hash look-up).
TEXT_CLASSES = frozenset(TEXT_TYPES)

_SHORT = reprlib.Repr()
_SHORT.maxstring = 80
_SHORT.maxother = 80
_SHORT.maxlong = 40
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxdict = _SHORT.maxset = 6
_SHORT.maxlevel = 3
#: What a step loop holds as the last result before any step returned.
UNSET: Any = object()
_RECORD_NOTE = " failed on the record "
#: Types whose name is the factory a user meant when passing a value of it (``initial=0`` → ``initial=int``).
_FACTORY_TYPES = frozenset({int, float, str, list, dict, tuple, set})


def shorten(value: Any) -> str:
    """``repr(value)``, shortened for an error message: ``shorten("x" * 500)`` is about 80 characters."""
    try:
        return _SHORT.repr(value)
    except Exception:  # noqa: BLE001 - a broken __repr__ must not hide the user's error
        return f"<{type(value).__name__} object>"


# -- build time ------------------------------------------------------------------------------------------------
def check_factory(owner: str, name: str, value: Any) -> None:
    """Refuse a state/initial value that is not a zero-argument factory (``initial=0`` instead of ``int``).

    Example: ``check_factory("KeyedReduce", "initial", 0)`` raises TypeError suggesting ``initial=int``.
    """
    if callable(value):
        return
    factory = type(value).__name__ if type(value) in _FACTORY_TYPES else "dict"
    raise TypeError(f"{owner}: {name} must be a zero-argument factory that makes the initial value "
                    f"(each key gets its own), got {shorten(value)}; write e.g. {name}={factory} or "
                    f"{name}=lambda: {shorten(value)}")


def check_operator(op: Any, name: str | None = None) -> str | None:
    """What is wrong with operator ``op``'s class for the runtime to drive it, or None.

    Called by ``Flow.add`` so that the class API's mistakes are refused at build
    time: a missing ``super().__init__()``, a plain ``def process`` (or one with
    ``yield``), an ``async def`` where the runtime calls a plain function.
    """
    cls = type(op).__name__
    label = f"operator {name!r} ({cls})" if name else f"operator class {cls}"
    if any(not hasattr(op, attr) for attr in ("n_inputs", "n_outputs", "control_inputs")):
        return (f"{label} was not initialised: its __init__ must call "
                f"super().__init__(inputs=..., outputs=...) (es.Operator's __init__ sets the ports)")
    driver = getattr(op, "driver", None)
    if driver == Driver.COROUTINE:
        return _coroutine_problem(op, label)
    method = {Driver.BATCH: "on_batch", Driver.PULL: "next_batch"}.get(driver)
    if method and _is_async(getattr(type(op), method, None)):
        return (f"{label}: {method} must be a plain function (def {method}), not async: "
                f"the runtime calls it and uses what it returns")
    return None


def _coroutine_problem(op: Any, label: str) -> str | None:
    process = getattr(type(op), "process", None)
    if process is Operator.process:
        return f"{label} has no process method: write async def process(self, ctx)"
    if inspect.isasyncgenfunction(process):
        return (f"{label}: process is an async generator (it contains yield): push tuples with "
                f"await ctx.outputs[i].push(x) instead, inside async def process(self, ctx)")
    if inspect.isfunction(process) and not inspect.iscoroutinefunction(process):
        return (f"{label}: process is a plain function; write async def process(self, ctx) "
                f"(the runtime resumes it as a coroutine: await ctx.wait_for_all(...), await port.push(x))")
    return None


def _is_async(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn)


# -- the first record ----------------------------------------------------------------------------------------
def step_result_problem(result: Any) -> str | None:
    """Why ``result`` is not what a step returns, ``(new_state, outputs)``, or None if it is."""
    if result is UNSET:
        return None
    if type(result) not in (tuple, list) or len(result) != 2:
        return f"it returned {shorten(result)} ({type(result).__name__})"
    outputs = result[1]
    if isinstance(outputs, TEXT_TYPES):
        return (f"its outputs are the {type(outputs).__name__} {shorten(outputs)}, which would be emitted item by "
                f"item; wrap one output in a list: (new_state, [value])")
    if outputs is not None and not _iterable(outputs):
        return (f"its outputs {shorten(outputs)} ({type(outputs).__name__}) are not an iterable; "
                f"wrap one output in a list: (new_state, [value]), or return (new_state, ()) for none")
    return None


def _iterable(value: Any) -> bool:
    try:
        iter(value)
    except TypeError:
        return False
    return True


def refuse_text_outputs(who: str, record: Any, outputs: Any) -> TypeError:
    """The error for a step that returned a str/bytes as its outputs (raise it)."""
    return TypeError(f"{who}: step must return (new_state, outputs) with outputs an iterable of tuples to emit, "
                     f"not a {type(outputs).__name__} ({shorten(outputs)} would be emitted character by character); "
                     f"write (new_state, [value]) — on the record {shorten(record)}")


# -- failures --------------------------------------------------------------------------------------------------
def failed_record(items: list, it: Iterator[Any]) -> Any:
    """The item of ``items`` that ``it`` (a list iterator over it) last handed out, e.g. to a failing ``map``."""
    left = it.__length_hint__() if hasattr(it, "__length_hint__") else 0
    i = len(items) - left - 1
    return items[i] if 0 <= i < len(items) else None


def note_failed_record(exc: BaseException, who: str, record: Any) -> None:
    """Add a note to ``exc`` naming the operator ``who`` and the (shortened) ``record``; once per exception."""
    notes = getattr(exc, "__notes__", ())
    if not any(n.startswith(NOTE_PREFIX) and _RECORD_NOTE in n for n in notes):
        exc.add_note(f"{NOTE_PREFIX}{who}{_RECORD_NOTE}{shorten(record)}")


def note_fold_hint(exc: BaseException, who: str,
                   first: str = "each key's fold starts from the key's first tuple") -> None:
    """Add to a fold's TypeError that, without ``initial``, the fold starts from a tuple (``first`` says which)."""
    if isinstance(exc, TypeError) and not any("initial" in n for n in getattr(exc, "__notes__", ())):
        exc.add_note(f"{NOTE_PREFIX}{who} has no initial, so {first} itself (the accumulator is that tuple); "
                     f"to start from a value give a zero-argument factory, e.g. initial=int, initial=list "
                     f"or initial=lambda: 0")


def explain_step_failure(exc: BaseException, who: str, record: Any, result: Any,
                         step: Any = None) -> TypeError | None:
    """When a step loop failed on ``record``: the TypeError stating the step's contract if ``result`` (what the
    step last returned) has the wrong shape (raise it ``from None``); else None, ``exc`` now noted (re-raise it).

    ``result`` must be what the step returned for ``record`` or an earlier, well-formed result (the loop
    unpacks each result before the next record), or :data:`UNSET`; so a wrong shape here is the cause of ``exc``.
    """
    problem = step_result_problem(result)
    if problem is None:
        note_failed_record(exc, who, record)
        return None
    return TypeError(f"{who}: step must return (new_state, outputs), outputs an iterable of tuples to emit "
                     f"(e.g. (state + x, [x]) or (state, ())); {problem} — on the record {shorten(record)}"
                     f"{_defined_at(step)}")


def _defined_at(fn: Any) -> str:
    """`` (step defined at file:line)`` for a Python function, else nothing: where to fix a step's contract."""
    code = getattr(fn, "__code__", None) or getattr(getattr(fn, "__func__", None), "__code__", None)
    return f" (step defined at {code.co_filename}:{code.co_firstlineno})" if code is not None else ""


# -- coroutine operators ---------------------------------------------------------------------------------------
def push_not_awaited(operator: str, port: int) -> RuntimeError:
    """The error for a ``push`` whose awaitable was dropped (raise it)."""
    return RuntimeError(f"operator {operator!r}: ctx.outputs[{port}].push(...) was not awaited; write "
                        f"await ctx.outputs[{port}].push(x) (or await ... push_many(xs)): a push suspends while "
                        f"the buffer downstream is full")


def foreign_await(operator: str, message: Any) -> RuntimeError:
    """The error for an operator that awaited something elastream does not drive (an asyncio sleep, a future)."""
    return RuntimeError(f"operator {operator!r} awaited something that is not elastream's (it yielded "
                        f"{shorten(message)}), e.g. asyncio.sleep or an asyncio future; operators run on "
                        f"elastream's workers, not in an asyncio event loop: use await ctx.sleep(seconds), "
                        f"await ctx.wait_for_all(...) / ctx.wait_for_any(...) and await port.push(x)")


def explain_asyncio(operator: str, exc: RuntimeError) -> RuntimeError | None:
    """The error for ``asyncio.sleep(s)`` & co. inside an operator (they need a running asyncio loop), or None."""
    if "no running event loop" not in str(exc) and "no current event loop" not in str(exc):
        return None
    return RuntimeError(f"operator {operator!r} used asyncio (e.g. asyncio.sleep), but operators do not run in "
                        f"an asyncio event loop: use await ctx.sleep(seconds) to wait without holding a worker")
