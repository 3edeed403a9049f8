"""Delta file statistics (numRecords, minValues, maxValues, nullCount) from Arrow batches.

Statistics are computed from the batches as they are written, so they describe exactly
the rows in the file. Bounds are only recorded where they are certainly bounds: no
min/max for binary, nested or zone-less timestamps, or non-finite floats. A
string longer than 32 characters is bounded by its prefix below and by that prefix with
its last character raised above (or by the whole string, when no character can be).
"""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

STRING_PREFIX = 32
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_UNITS_PER_MS = {"ms": 1, "us": 1_000, "ns": 1_000_000}


def _has_bounds(t: pa.DataType) -> bool:
    return (
        pa.types.is_integer(t)
        or pa.types.is_boolean(t)
        or pa.types.is_floating(t)
        or pa.types.is_decimal(t)
        or pa.types.is_date32(t)
        or (pa.types.is_timestamp(t) and t.tz is not None)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
    )


class StatsCollector:
    """Accumulates the statistics of one file, batch by batch."""

    def __init__(self, schema: pa.Schema) -> None:
        self._schema = schema
        self.num_records = 0
        self._nulls = [0] * len(schema)
        self._min: list[pa.Scalar | None] = [None] * len(schema)
        self._max: list[pa.Scalar | None] = [None] * len(schema)
        # A column loses its bounds for the whole file once one batch cannot bound it.
        self._bounded = [_has_bounds(f.type) for f in schema]

    def add(self, batch: pa.RecordBatch) -> None:
        self.num_records += batch.num_rows
        for i, column in enumerate(batch.columns):
            self._nulls[i] += column.null_count
            if not self._bounded[i] or column.null_count == len(column):
                continue
            mm = pc.min_max(column)
            lo, hi = mm["min"], mm["max"]
            # min_max skips NaN, but Spark orders NaN above every number: with a NaN in
            # the file no finite max is an upper bound. JSON has no infinity either.
            if pa.types.is_floating(column.type) and (
                pc.any(pc.is_nan(column)).as_py()
                or not (math.isfinite(lo.as_py()) and math.isfinite(hi.as_py()))
            ):
                self._bounded[i] = False
                continue
            if self._min[i] is None or pc.less(lo, self._min[i]).as_py():
                self._min[i] = lo
            if self._max[i] is None or pc.greater(hi, self._max[i]).as_py():
                self._max[i] = hi

    def to_json(self) -> str:
        """The ``stats`` string of the file's add action."""
        mins: dict[str, str] = {}
        maxs: dict[str, str] = {}
        nulls: dict[str, str] = {}
        for i, field in enumerate(self._schema):
            if not pa.types.is_struct(field.type):
                nulls[field.name] = str(self._nulls[i])
            if not self._bounded[i] or self._min[i] is None:
                continue
            lo = _json_value(self._min[i], field.type, upper=False)
            hi = _json_value(self._max[i], field.type, upper=True)
            if lo is not None:
                mins[field.name] = lo
            if hi is not None:
                maxs[field.name] = hi
        return (
            f'{{"numRecords":{self.num_records},"minValues":{_obj(mins)},'
            f'"maxValues":{_obj(maxs)},"nullCount":{_obj(nulls)}}}'
        )


def _obj(values: dict[str, str]) -> str:
    # Values are already JSON text: decimals must keep every digit, which float cannot.
    return "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in values.items()) + "}"


def _json_value(scalar: Any, t: pa.DataType, *, upper: bool) -> str | None:
    if pa.types.is_timestamp(t):
        return _timestamp(scalar.cast(pa.int64()).as_py(), t.unit, upper=upper)
    if pa.types.is_date32(t):
        try:
            day = _EPOCH.date() + dt.timedelta(days=scalar.cast(pa.int32()).as_py())
        except OverflowError:  # outside years 1 to 9999: no bound
            return None
        return f'"{day.year:04d}-{day.month:02d}-{day.day:02d}"'
    value = scalar.as_py()
    if pa.types.is_decimal(t):
        return format(value, "f")  # (str() writes 0E-7, which delta-rs reads as no bound)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        if len(value) > STRING_PREFIX:
            # A prefix is a lower bound; the prefix with its last character raised, one
            # above every string that starts with it, an upper bound.
            if not upper:
                return json.dumps(value[:STRING_PREFIX])
            above = _above(value[:STRING_PREFIX])
            return json.dumps(value if above is None else above)  # (whole, the max itself)
        return json.dumps(value)
    return json.dumps(value)


def _above(prefix: str) -> str | None:
    """A string above every string that starts with ``prefix`` in code point order (the
    order Spark, delta-rs, DuckDB and Polars compare in): ``prefix`` with its last
    character that can be raised raised by one, past the surrogates, and not from U+FFFF
    to the planes above (UTF-16 would sort that lower); None when none can."""
    for i in range(len(prefix) - 1, -1, -1):
        code = ord(prefix[i])
        if code in (0xFFFF, 0x10FFFF):
            continue
        code = 0xE000 if code == 0xD7FF else code + 1
        return prefix[:i] + chr(code)
    return None


def _timestamp(value: int, unit: str, *, upper: bool) -> str | None:
    try:
        when = _EPOCH + dt.timedelta(milliseconds=_millis(value, unit, upper=upper))
    except OverflowError:  # past 9999-12-31 23:59:59.999 once rounded up: no bound
        return None
    return (  # (strftime's %Y leaves a year below 1000 unpadded)
        f'"{when.year:04d}-{when.month:02d}-{when.day:02d}T{when.hour:02d}:{when.minute:02d}'
        f':{when.second:02d}.{when.microsecond // 1000:03d}Z"'
    )


def _millis(value: int, unit: str, *, upper: bool) -> int:
    # Delta stats hold milliseconds: round the lower bound down and the upper bound up.
    if unit == "s":
        return value * 1000
    per_ms = _UNITS_PER_MS[unit]
    return -(-value // per_ms) if upper else value // per_ms
