"""The standard operator library, under the class names DESIGN.md fixes."""

from elastream.ops.busy import Busy
from elastream.ops.file_sinks import ToCSV, ToJSONL, ToParquet
from elastream.ops.file_sources import FromCSV, FromJSONL, FromParquet, TextLines
from elastream.ops.keyed import KeyedProcess, KeyedReduce, StatefulProcess
from elastream.ops.records import DeadLetter, ErrorPolicy, WrittenFile
from elastream.ops.sinks import Callback, Collect
from elastream.ops.sources import FromGenerator, FromIterable, RateLimited
from elastream.ops.transforms import Barrier, Filter, FlatMap, Map, Union
from elastream.ops.windows import (Session, Sliding, Tumbling, WatermarkCloser, WindowAggregate, WindowResult,
                                   WindowUpdate)

__all__ = ["Barrier", "Busy", "Callback", "Collect", "DeadLetter", "ErrorPolicy", "Filter", "FlatMap", "FromCSV",
           "FromGenerator", "FromIterable", "FromJSONL", "FromParquet", "KeyedProcess", "KeyedReduce", "Map",
           "RateLimited", "Session", "Sliding", "StatefulProcess", "TextLines", "ToCSV", "ToJSONL", "ToParquet",
           "Tumbling", "Union", "WatermarkCloser", "WindowAggregate", "WindowResult", "WindowUpdate", "WrittenFile"]
