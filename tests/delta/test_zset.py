"""Z-sets: a row changed only from 0.0 to -0.0 (or back) is changed."""

from __future__ import annotations

import math

import pyarrow as pa

from deltamv.delta._zset import WEIGHT, apply, consolidate

SCHEMA = pa.schema([("id", pa.int64()), ("x", pa.float64())])


def _signs(table: pa.Table) -> list[tuple[int, float]]:
    return sorted((r["id"], math.copysign(1.0, r["x"])) for r in table.to_pylist())


def test_a_change_from_zero_to_minus_zero_does_not_cancel_and_applies() -> None:
    change = pa.table({"id": [1, 1, 2, 2], "x": [0.0, -0.0, float("nan"), float("nan")],
                       WEIGHT: [-1, 1, -1, 1]})  # fmt: skip
    zset = consolidate(change, SCHEMA)
    got = [(r["id"], math.copysign(1.0, r["x"]), int(w))
           for r, w in zip(zset.rows.to_pylist(), zset.weights, strict=True)]  # fmt: skip
    assert sorted(got) == [(1, -1.0, 1), (1, 1.0, -1)]  # (the NaNs cancel: one NaN)
    existing = pa.table({"id": [1, 3], "x": [0.0, -0.0]}, schema=SCHEMA)
    assert _signs(apply(existing, zset, key="id", table="t")) == [(1, -1.0), (3, -1.0)]
