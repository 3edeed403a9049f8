"""Typed Arrow values in and out of SQLite, exactly; Arrow tables as blobs."""

from __future__ import annotations

import datetime as dt
import math
import sqlite3
import struct
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from deltamv.state.codec import from_blob, from_rows, normalise_floats, sql_type, to_blob, to_rows

UTC = dt.UTC
SCHEMA = pa.schema([
    ("i", pa.int64()), ("small", pa.int8()), ("b", pa.bool_()), ("f", pa.float64()),
    ("f32", pa.float32()), ("d", pa.decimal128(38, 4)), ("day", pa.date32()),
    ("at", pa.timestamp("us", tz="UTC")), ("local", pa.timestamp("us")), ("s", pa.string()),
    ("bin", pa.binary()),
])  # fmt: skip
ROWS = [
    {"i": 2**63 - 1, "small": -128, "b": True, "f": -0.0, "f32": 1.5, "d": Decimal("-12.5000"),
     "day": dt.date(1, 1, 1), "at": dt.datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=UTC),
     "local": dt.datetime(1970, 1, 1), "s": "", "bin": b"\x00\xff"},
    {"i": -(2**63), "small": 127, "b": False, "f": math.nan, "f32": -math.inf,
     "d": Decimal("9999999999999999999999999999999999.9999"), "day": dt.date(9999, 12, 31),
     "at": dt.datetime(1, 1, 1, tzinfo=UTC), "local": dt.datetime(2262, 4, 11), "s": "é\u0000x",
     "bin": b""},
    dict.fromkeys(SCHEMA.names),
]  # fmt: skip


def bits(x: float | None) -> int | None:
    return None if x is None else struct.unpack("<q", struct.pack("<d", x))[0]


def stored(table: pa.Table) -> pa.Table:
    """``table`` written to a SQLite table and read back, as the state does it."""
    db = sqlite3.connect(":memory:")
    columns = ", ".join(f'"{f.name}" {sql_type(f.type)}' for f in table.schema)
    db.execute(f"CREATE TABLE t ({columns})")
    marks = ", ".join("?" for _ in table.schema)
    db.executemany(f"INSERT INTO t VALUES ({marks})", to_rows(table))
    return from_rows(db.execute("SELECT * FROM t").fetchall(), table.schema)


def test_every_type_round_trips_through_sqlite_exactly() -> None:
    table = pa.Table.from_pylist(ROWS, schema=SCHEMA)
    back = stored(table)
    assert back.schema == SCHEMA
    for name in SCHEMA.names:
        if pa.types.is_floating(SCHEMA.field(name).type):  # NaN != NaN: compare the bits
            want = [bits(v) for v in table.column(name).cast(pa.float64()).to_pylist()]
            assert [bits(v) for v in back.column(name).cast(pa.float64()).to_pylist()] == want
        else:
            assert back.column(name).equals(table.column(name)), name


def test_negative_zero_and_nan_keep_their_bits() -> None:
    table = pa.table({"f": [-0.0, 0.0, math.nan, None]})
    values = stored(table).column("f").to_pylist()
    assert math.copysign(1, values[0]) == -1 and math.copysign(1, values[1]) == 1
    assert math.isnan(values[2])
    assert values[3] is None


def test_decimals_are_stored_in_their_scale_so_equal_values_are_equal_texts() -> None:
    table = pa.table({"d": pa.array([Decimal("1.5"), Decimal("1.50")], pa.decimal128(10, 2))})
    assert to_rows(table) == [("1.50",), ("1.50",)]


@given(st.lists(st.floats(allow_nan=True, allow_infinity=True) | st.none(), max_size=20))
def test_any_doubles_round_trip_bit_for_bit(values: list[float | None]) -> None:
    back = stored(pa.table({"f": pa.array(values, pa.float64())}))
    assert [bits(v) for v in back.column("f").to_pylist()] == [bits(v) for v in values]


@given(st.lists(st.decimals(min_value=-(10**8), max_value=10**8, places=4) | st.none(),
                max_size=20))  # fmt: skip
def test_any_decimals_round_trip(values: list[Decimal | None]) -> None:
    table = pa.table({"d": pa.array(values, pa.decimal128(18, 4))})
    assert stored(table).equals(table)


def test_blobs_carry_a_table_whole_and_typed() -> None:
    table = pa.Table.from_pylist(ROWS, schema=SCHEMA)
    back = from_blob(to_blob(table))
    assert back.schema == SCHEMA
    assert to_rows(back) == to_rows(table)  # bits of the floats included
    assert from_blob(to_blob(SCHEMA.empty_table())).schema == SCHEMA


def test_normalised_floats_compare_the_way_spark_groups_them() -> None:
    table = pa.table({"f": [0.0, -0.0, math.nan, -math.nan], "g": [-0.0] * 4})
    fixed = normalise_floats(table, ["f"])
    assert len({bits(v) for v in fixed.column("f").to_pylist()[:2]}) == 1
    assert len({bits(v) for v in fixed.column("f").to_pylist()[2:]}) == 1
    assert fixed.column("g").equals(table.column("g"))  # only the columns named


def test_a_type_without_storage_is_refused() -> None:
    with pytest.raises(TypeError, match="no SQLite storage"):
        sql_type(pa.list_(pa.int64()))
