"""elastream: an elastic stream processing engine for Python.

Example::

    import elastream as es

    flow = es.Flow("hello")
    flow.source(range(10)).map(lambda x: x * x).sink(es.ops.Collect(), name="out")
    print(es.Runner(threads=2).run(flow).outputs["out"])
"""

from elastream import ops, policies
from elastream.errors import ElastreamError, FlowValidationError, OperatorError, RecordError
from elastream.graph.flow import Flow, InputRef, OperatorHandle, OutputRef
from elastream.operators.base import FunctionOperator, Operator, SourceOperator, Status
from elastream.runtime.context import Context, InputPort, OutputPort
from elastream.execution.runner import Runner
from elastream.elastic.config import Elastic
from elastream.operators.spec import Kind, OperatorSpec
from elastream.runtime.config import OrderingConfig, ProcessConfig, RunConfig, SchedulingConfig
from elastream.runtime.handle import RunHandle, RunResult
from elastream.runtime.states import OperatorState

__version__ = "0.1.0"

__all__ = [
    "Context", "Elastic", "ElastreamError", "Flow", "FlowValidationError", "FunctionOperator", "InputPort", "InputRef", "Kind",
    "Operator", "OperatorError", "OperatorHandle", "OperatorSpec", "OperatorState", "OrderingConfig", "OutputPort",
    "OutputRef", "ProcessConfig", "RecordError", "RunConfig", "RunHandle", "RunResult", "Runner", "SchedulingConfig",
    "SourceOperator", "Status", "ops", "policies",
]
