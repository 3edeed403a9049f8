"""TiDB-style TSO timestamps: ``(physical_ms << 18) | logical`` (docs/changelog-format.md)."""

from __future__ import annotations

import datetime as _dt
import time

LOGICAL_BITS = 18
LOGICAL_MASK = (1 << LOGICAL_BITS) - 1


def compose(physical_ms: int, logical: int = 0) -> int:
    """The TSO value of a physical time in ms and a logical counter."""
    if not 0 <= logical <= LOGICAL_MASK:
        raise ValueError(f"logical part {logical} out of range 0..{LOGICAL_MASK}")
    return (physical_ms << LOGICAL_BITS) | logical


def physical_ms(ts: int) -> int:
    """Milliseconds since the Unix epoch of a TSO value."""
    return ts >> LOGICAL_BITS


def logical(ts: int) -> int:
    return ts & LOGICAL_MASK


def lag_ms(watermark: int, now_ms: int | None = None) -> int:
    """How far a watermark trails wall-clock time, in ms."""
    if now_ms is None:
        now_ms = int(time.time() * 1000)
    return now_ms - physical_ms(watermark)


def to_datetime(ts: int) -> _dt.datetime:
    """The UTC wall-clock time of a TSO value."""
    return _dt.datetime.fromtimestamp(physical_ms(ts) / 1000, tz=_dt.UTC)


def from_datetime(when: _dt.datetime) -> int:
    """The largest TSO value at or before ``when`` (logical part all ones)."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.UTC)
    return compose(int(when.timestamp() * 1000), LOGICAL_MASK)
