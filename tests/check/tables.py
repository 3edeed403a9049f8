"""Hand-made view tables: any rows, any watermark, committed the way the job commits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from deltamv import delta
from deltamv.delta.commit import JOB_KEY, WATERMARK_KEY


def commit_version(
    path: str, rows: Sequence[dict[str, Any]], schema: pa.Schema, *, watermark: int | None,
    job: str = "hand", batch: int | None = None,
) -> int:  # fmt: skip
    """Commit ``rows`` as the table's next version with ``watermark`` in its commit info."""
    current = delta.table_version(path)
    version = 0 if current is None else current + 1
    files = delta.write_arrow(
        pa.Table.from_pylist(list(rows), schema=schema), path, schema=schema, prefix=f"v{version}"
    )
    metadata = {JOB_KEY: job}
    if watermark is not None:
        metadata[WATERMARK_KEY] = str(watermark)
    result = delta.commit(
        path, schema=schema, add=files, replace=True, app_id=f"deltamv:{job}",
        batch_id=batch if batch is not None else version + 1, metadata=metadata,
        expected_version=current,
    )  # fmt: skip
    return result.version
