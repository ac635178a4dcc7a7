"""Runtime mechanism: buffers, tasks, the base scheduler, workers, the threads backend."""

from elastream.runtime.context import Context, InputPort, OutputPort
from elastream.runtime.handle import RunHandle, RunResult
from elastream.runtime.states import OperatorState

__all__ = ["Context", "InputPort", "OperatorState", "OutputPort", "RunHandle", "RunResult"]
