"""Change-log events as the rest of the pipeline sees them: one Arrow schema.

The source parses and validates segment files (``format.py``) into record batches of
:data:`EVENT_SCHEMA`; the pipeline consumes only these. ``value`` and ``old_value``
stay JSON text (validated against the table's schema, normalised), so rows of every
table share one schema; they become typed columns when written to a mirror.

The driver-side parser (``batch.py``) hands out :data:`CONTROL_SCHEMA` events instead,
with each table's row values as typed Arrow columns beside them.
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa

PREWRITE: Final = "PREWRITE"
COMMIT: Final = "COMMIT"
ROLLBACK: Final = "ROLLBACK"
COMMITTED: Final = "COMMITTED"
INITIALIZED: Final = "INITIALIZED"
RESOLVED: Final = "RESOLVED"
RETIRED: Final = "RETIRED"
EVENT_TYPES: Final = frozenset(
    {PREWRITE, COMMIT, ROLLBACK, COMMITTED, INITIALIZED, RESOLVED, RETIRED}
)

PUT: Final = "PUT"
DELETE: Final = "DELETE"
OPS: Final = frozenset({PUT, DELETE})

# The fields of one event after its region, in the change log's order: the columns of a
# Parquet segment, with value and old_value as JSON object text.
_FIELDS: Final = [
    pa.field("type", pa.string(), nullable=False),
    pa.field("start_ts", pa.int64()),
    pa.field("commit_ts", pa.int64()),
    pa.field("ts", pa.int64()),
    pa.field("table", pa.string()),
    pa.field("key", pa.string()),
    pa.field("op", pa.string()),
    pa.field("value", pa.string()),  # JSON object text, normalised to the table schema
    pa.field("old_value", pa.string()),
    pa.field("start_key", pa.string()),
    pa.field("end_key", pa.string()),
    pa.field("parents", pa.list_(pa.int64())),
    pa.field("primary", pa.string()),
    pa.field("large", pa.bool_()),
]
_ROW_VALUES: Final = ("value", "old_value")


def _where(file: pa.DataType) -> list[pa.Field]:
    return [
        pa.field("file", file, nullable=False),  # the segment (its path, or an index)
        pa.field("line", pa.int64(), nullable=False),  # 1-based line (row index + 1 in Parquet)
        pa.field("region", pa.int64(), nullable=False),
        pa.field("seq", pa.int64(), nullable=False),  # the segment's <seq>
    ]


EVENT_SCHEMA: Final = pa.schema([*_where(pa.string()), *_FIELDS])

EVENT_DDL: Final = (
    "file STRING NOT NULL, line BIGINT NOT NULL, region BIGINT NOT NULL, seq BIGINT NOT NULL, "
    "type STRING NOT NULL, start_ts BIGINT, commit_ts BIGINT, ts BIGINT, `table` STRING, "
    "key STRING, op STRING, value STRING, old_value STRING, start_key STRING, end_key STRING, "
    "parents ARRAY<BIGINT>, `primary` STRING, large BOOLEAN"
)

CONTROL_SCHEMA: Final = pa.schema(
    [*_where(pa.int32()), *(f for f in _FIELDS if f.name not in _ROW_VALUES)]
)
"""The events of a driver-side :class:`~deltamv.changelog.batch.EventBatch`: EVENT_SCHEMA
without the row values, which travel typed, per table, beside it."""
