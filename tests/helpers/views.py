"""Hand-made view tables: any rows, any watermark, committed the way the job commits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from deltamv import delta
from deltamv.delta import Replace, TableSink
from deltamv.delta.commit import JOB_KEY, WATERMARK_KEY


def commit_version(
    path: str, rows: Sequence[dict[str, Any]], schema: pa.Schema, *, watermark: int | None,
    job: str = "hand", batch: int | None = None,
) -> int:  # fmt: skip
    """Commit ``rows`` as the table's next version with ``watermark`` in its commit info."""
    current = delta.table_version(path)
    version = 0 if current is None else current + 1
    sink = TableSink(
        path, schema, layout=[schema.names[0]], app_id=f"deltamv:{job}", metadata={JOB_KEY: job}
    )
    metadata = {} if watermark is None else {WATERMARK_KEY: str(watermark)}
    result = sink.commit(
        batch if batch is not None else version + 1,
        Replace(pa.Table.from_pylist(list(rows), schema=schema)),
        metadata=metadata,
        expected_version=current,
    )
    return result.version
