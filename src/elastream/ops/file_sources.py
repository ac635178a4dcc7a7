"""File sources: :class:`TextLines`, :class:`FromCSV`, :class:`FromJSONL`, :class:`FromParquet`.

The sources live in their own modules and are all importable from here:

* :mod:`elastream.ops.text_sources` — :class:`TextLines`, :class:`FromJSONL`;
* :mod:`elastream.ops.csv_source` — :class:`FromCSV`;
* :mod:`elastream.ops.parquet_source` — :class:`FromParquet`;
* :mod:`elastream.ops.arrow_rows` — :func:`rows_of`, :func:`column_values` (Arrow batches to rows);
* :mod:`elastream.ops.text_decoding` — the decoding helpers of the text sources;
* :mod:`elastream.ops.records` — the error policies and :class:`~elastream.ops.records.RecordSource`.

Each source opens its file in ``open(ctx)`` and closes it in ``close()``; the
runtime pulls batches with ``next_batch(max_items)``. CSV and JSON-lines sources
parse records and send malformed ones through their error policy; line numbers
are 1-based physical lines of the file.

Threading: a source runs in one worker at a time, though not always the same
worker, so the open file is used by one thread at a time only.
"""

from elastream.ops.arrow_rows import column_values, rows_of
from elastream.ops.csv_source import FromCSV
from elastream.ops.parquet_source import FromParquet
from elastream.ops.text_sources import FromJSONL, TextLines

__all__ = ["FromCSV", "FromJSONL", "FromParquet", "TextLines", "column_values", "rows_of"]
