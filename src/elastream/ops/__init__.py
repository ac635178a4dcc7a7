"""The standard operator library, under the class names DESIGN.md fixes."""

from elastream.ops.busy import Busy
from elastream.ops.keyed import KeyedProcess, KeyedReduce, StatefulProcess
from elastream.ops.sinks import Callback, Collect
from elastream.ops.sources import FromGenerator, FromIterable, RateLimited
from elastream.ops.transforms import Barrier, Filter, FlatMap, Map, Union

__all__ = ["Barrier", "Busy", "Callback", "Collect", "Filter", "FlatMap", "FromGenerator", "FromIterable",
           "KeyedProcess", "KeyedReduce", "Map", "RateLimited", "StatefulProcess", "Union"]
