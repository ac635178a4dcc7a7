"""Runtime mechanism: buffers, tasks, the base scheduler, workers, runner."""

from elastream.runtime.context import Context, InputPort, OutputPort
from elastream.runtime.runner import RunHandle, Runner, RunResult
from elastream.runtime.states import OperatorState

__all__ = ["Context", "InputPort", "OperatorState", "OutputPort", "RunHandle", "RunResult", "Runner"]
