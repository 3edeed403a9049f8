"""Row identity: the ``_key`` of a row, from its table's name and primary-key values.

``_key = <table>/<JSON array of the primary-key values>``, e.g. ``accounts/[42]`` or
``orders/[7,"2024-01-31"]``. The table is the job's name for it (``[tables.<name>]``),
so keys are unique across tables (table names cannot hold ``/``). Every value renders
one stable way, computed from the typed Arrow value, so a row gets the same key
whether it came from the snapshot copy or from a change:

- integers as JSON numbers; booleans as ``true``/``false``;
- DECIMAL as a JSON string of its exact text at the column's scale (``"12.50"``);
- FLOAT/DOUBLE as a JSON string of Arrow's shortest round-trip text;
- STRING as a JSON string (``json.dumps``, non-ASCII kept);
- DATE as ``"YYYY-MM-DD"``; TIMESTAMP as ``"YYYY-MM-DDTHH:MM:SS.ffffffZ"`` (UTC);
- BINARY as a JSON string of lower-case hex.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from deltamv.schema import TableSchema

__all__ = ["row_keys"]

_NEEDS_ESCAPE = r'[\x00-\x1f"\\]'


def row_keys(
    name: str,
    schema: TableSchema,
    primary_key: Sequence[str],
    data: pa.Table | pa.RecordBatch,
) -> pa.Array:
    """The ``_key`` of every row of ``data`` (typed as ``schema``), as a string array.

    Raises ValueError if a primary-key value is null.
    """
    parts: list[pa.Array | str] = [f"{name}/["]
    for i, col_name in enumerate(primary_key):
        column = schema.column(col_name)
        if column is None:
            raise ValueError(f"primary-key column {col_name!r} is not in the schema of {name}")
        values = data.column(col_name)
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        if values.null_count:
            raise ValueError(f"null primary-key value in column {name}.{col_name}")
        if i:
            parts.append(",")
        parts.append(_render(values, column.kind))
    parts.append("]")
    if data.num_rows == 0:
        return pa.array([], pa.string())
    arrays = [p if isinstance(p, pa.Array) else pa.array([p] * data.num_rows) for p in parts]
    return pc.binary_join_element_wise(*arrays, "")


def _quoted(values: pa.Array) -> pa.Array:
    return pc.binary_join_element_wise('"', values, '"', "")


def _render(values: pa.Array, kind: str) -> pa.Array:
    if kind in ("tinyint", "smallint", "int", "bigint"):
        return values.cast(pa.string())
    if kind == "boolean":
        return pc.if_else(values, "true", "false")
    if kind in ("decimal", "float", "double", "date"):
        return _quoted(values.cast(pa.string()))
    if kind == "timestamp":
        return _quoted(pc.strftime(values, format="%Y-%m-%dT%H:%M:%SZ"))
    if kind == "binary":
        return pa.array([json.dumps(v.hex()) for v in values.to_pylist()], pa.string())
    # strings: most need no escaping; json.dumps the few that do
    escape = pc.match_substring_regex(values, _NEEDS_ESCAPE)
    if not pc.any(escape).as_py():
        return _quoted(values)
    return pa.array([json.dumps(v, ensure_ascii=False) for v in values.to_pylist()], pa.string())
