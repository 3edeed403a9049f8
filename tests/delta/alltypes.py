"""A table with a column of every type the job writes, and rows for it."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa

ALL_TYPES = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("name", pa.string()),
        ("score", pa.float64()),
        ("amount", pa.decimal128(18, 2)),
        ("day", pa.date32()),
        ("at", pa.timestamp("us", tz="UTC")),
        ("flag", pa.bool_()),
    ]
)
ALL_TYPES_DDL = (
    "id BIGINT NOT NULL, name STRING, score DOUBLE, amount DECIMAL(18, 2), day DATE,"
    " at TIMESTAMP, flag BOOLEAN"
)


def all_types_rows(n: int, start: int = 0) -> list[dict[str, object]]:
    """Rows of ALL_TYPES with every column populated, plus nulls in the nullable ones."""
    base = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    rows: list[dict[str, object]] = []
    for i in range(start, start + n):
        rows.append(
            {
                "id": i,
                "name": None if i % 7 == 3 else f"name-{i}",
                "score": i * 1.5,
                "amount": decimal.Decimal(i * 100 + 99) / 100 + decimal.Decimal("123456789012"),
                "day": dt.date(2024, 1, 1) + dt.timedelta(days=i),
                "at": base + dt.timedelta(seconds=i, microseconds=i * 7 % 1000),
                "flag": None if i % 5 == 0 else i % 2 == 0,
            }
        )
    return rows
