"""Spark's ``lpad``, ``rpad`` and ``repeat`` of strings, for the DuckDB side of
maintenance: counted in characters (code points) as Spark counts them.

- ``lpad(s, n, pad)``/``rpad``: ``s`` cut to its first ``n`` characters where it has
  ``n`` or more, or where ``pad`` is empty (``''`` for ``n`` of 0 or less); else ``pad``
  repeated and cut to the characters missing, before (``lpad``) or after ``s``.
- ``repeat(s, n)``: ``s`` ``n`` times, ``''`` for ``n`` of 0 or less.

NULL in any argument gives NULL (DuckDB calls these only on rows without one).
"""

from __future__ import annotations

import pyarrow as pa

__all__ = ["spark_lpad", "spark_repeat", "spark_rpad"]


def _pad(s: str, n: int, pad: str, *, left: bool) -> str:
    missing = n - len(s)
    if missing <= 0 or not pad:
        return s[: max(n, 0)]
    fill = (pad * (missing // len(pad) + 1))[:missing]
    return fill + s if left else s + fill


def _padded(values: pa.Array, lengths: pa.Array, pads: pa.Array, *, left: bool) -> pa.Array:
    return pa.array(
        [None if s is None or n is None or p is None else _pad(s, n, p, left=left)
         for s, n, p in zip(values.to_pylist(), lengths.to_pylist(), pads.to_pylist(),
                            strict=True)],
        pa.string(),
    )  # fmt: skip


def spark_lpad(values: pa.Array, lengths: pa.Array, pads: pa.Array) -> pa.Array:
    """Spark's ``lpad`` of each row."""
    return _padded(values, lengths, pads, left=True)


def spark_rpad(values: pa.Array, lengths: pa.Array, pads: pa.Array) -> pa.Array:
    """Spark's ``rpad`` of each row."""
    return _padded(values, lengths, pads, left=False)


def spark_repeat(values: pa.Array, times: pa.Array) -> pa.Array:
    """Spark's ``repeat`` of each row."""
    return pa.array(
        [None if s is None or n is None else s * max(n, 0)
         for s, n in zip(values.to_pylist(), times.to_pylist(), strict=True)],
        pa.string(),
    )  # fmt: skip
