from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import os

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from deltamv.delta import Replace, TableSink, spark_to_arrow, write_arrow
from deltamv.errors import DeltaMVError

from .alltypes import ALL_TYPES, ALL_TYPES_DDL, all_types_rows


def test_write_arrow_writes_files_into_the_table_folder(tmp_path) -> None:
    path = str(tmp_path / "t")
    data = pa.Table.from_pylist(all_types_rows(50), schema=ALL_TYPES)

    files = write_arrow(data, path, schema=ALL_TYPES, prefix="b-1", target_rows_per_file=20)

    assert sum(f.num_records for f in files) == 50
    assert len(files) == 3
    for f in files:
        assert f.path.startswith("b-1-") and "/" not in f.path
        assert os.path.getsize(os.path.join(path, f.path)) == f.size
        assert pq.read_schema(os.path.join(path, f.path)).remove_metadata() == ALL_TYPES
        assert json.loads(f.stats)["numRecords"] == f.num_records


def test_columns_are_taken_by_name_and_cast_to_the_given_schema(tmp_path) -> None:
    path = str(tmp_path / "t")
    data = pa.table(
        {
            "id": pa.array([0, 1, 2, 3], pa.int32()),
            "amount": pa.array([decimal.Decimal(i) for i in range(4)], pa.decimal128(10, 1)),
            "at": pa.array([dt.datetime(2024, 5, 6, 7, 8, 9, 123456)] * 4, pa.timestamp("us")),
        }
    )
    schema = pa.schema(
        [("at", pa.timestamp("us", tz="UTC")), ("id", pa.int64()), ("amount", pa.decimal128(18, 2))]
    )

    files = write_arrow(data, path, schema=schema, prefix="p")

    table = pa.concat_tables(pq.read_table(os.path.join(path, f.path)) for f in files)
    assert table.schema.remove_metadata() == schema
    assert sorted(table.column("id").to_pylist()) == [0, 1, 2, 3]


def test_a_cast_that_loses_data_fails_the_write(tmp_path) -> None:
    data = pa.table({"x": pa.array([decimal.Decimal("1.25")], pa.decimal128(10, 2))})
    with pytest.raises(pa.ArrowInvalid, match="Rescaling"):
        write_arrow(data, str(tmp_path / "t"), schema=pa.schema([("x", pa.decimal128(10, 1))]),
                    prefix="p")  # fmt: skip


def test_no_rows_write_no_file(tmp_path) -> None:
    schema = pa.schema([("id", pa.int64())])
    assert write_arrow(schema.empty_table(), str(tmp_path / "t"), schema=schema, prefix="p") == []
    assert not (tmp_path / "t").exists()


def test_stats_are_the_bounds_delta_readers_parse(tmp_path) -> None:
    path = str(tmp_path / "t")
    rows = all_types_rows(30)
    sink = TableSink(path, ALL_TYPES, layout=["id"], app_id="t", metadata={})
    sink.commit(1, Replace(pa.Table.from_pylist(rows, schema=ALL_TYPES)), metadata={},
                expected_version=None)  # fmt: skip

    (parsed,) = pa.table(DeltaTable(path).get_add_actions(flatten=True)).to_pylist()
    assert parsed["num_records"] == 30
    for column in ["id", "score", "amount", "day"]:
        values = [r[column] for r in rows]
        assert parsed[f"min.{column}"] == min(values), column
        assert parsed[f"max.{column}"] == max(values), column
    names = [r["name"] for r in rows if r["name"] is not None]
    assert (parsed["min.name"], parsed["max.name"]) == (min(names), max(names))
    at = [r["at"] for r in rows]
    # Milliseconds, widened outwards.
    assert parsed["min.at"] <= min(at) and parsed["max.at"] >= max(at)
    assert (max(at) - min(at)).total_seconds() + 0.002 >= (
        parsed["max.at"] - parsed["min.at"]
    ).total_seconds()
    assert parsed["null_count.name"] == sum(r["name"] is None for r in rows)
    assert parsed["null_count.flag"] == sum(r["flag"] is None for r in rows)


def test_stats_leave_out_bounds_that_would_be_wrong(tmp_path) -> None:
    schema = pa.schema([("s", pa.string()), ("x", pa.float64()), ("empty", pa.int64())])
    data = pa.table(
        {"s": ["a" * 40, "b" * 40], "x": [1.0, math.nan], "empty": [None, None]}, schema=schema
    )
    (f,) = write_arrow(data, str(tmp_path / "t"), schema=schema, prefix="a")
    stats = json.loads(f.stats)
    assert stats["minValues"] == {"s": "a" * 32}
    assert stats["maxValues"] == {"s": "b" * 31 + "c"}  # above every "b" * 32 + ...
    assert stats["nullCount"] == {"s": 0, "x": 0, "empty": 2}


@pytest.mark.parametrize(
    ("longest", "bound"),
    [
        ("x" * 31 + "\uffff" + "z", "x" * 30 + "y"),  # not U+10000: UTF-16 sorts it lower
        ("x" * 31 + "\ud7ff" + "z", "x" * 31 + "\ue000"),  # past the surrogates
        ("x" * 31 + "\U0010ffff" + "z", "x" * 30 + "y"),
        ("\U0010ffff" * 33, "\U0010ffff" * 33),  # none can be raised: the string itself
    ],
)
def test_a_long_strings_upper_bound_is_above_it(tmp_path, longest: str, bound: str) -> None:
    schema = pa.schema([("s", pa.string())])
    (f,) = write_arrow(pa.table({"s": ["a", longest]}), str(tmp_path / "t"), schema=schema,
                       prefix="a")  # fmt: skip
    stats = json.loads(f.stats)
    assert stats["maxValues"].get("s") == bound
    assert longest <= bound
    assert longest.encode("utf-16-be") <= bound.encode("utf-16-be")


def test_spark_finds_nan_in_the_files_written(tmp_path, spark: SparkSession) -> None:
    """Parquet's min and max leave NaN out, and Spark skips row groups by them: the files
    carry no statistics for floating-point columns, so ``x = NaN`` finds its row."""
    schema = pa.schema([("id", pa.int64()), ("x", pa.float64()), ("s", pa.string())])
    data = pa.table(
        {"id": [1, 2, 3], "x": [1.0, math.nan, 2.0], "s": ["a", "b", "c"]}, schema=schema
    )
    (f,) = write_arrow(data, str(tmp_path / "t"), schema=schema, prefix="a")
    path = str(tmp_path / "t" / f.path)
    chunk = pq.ParquetFile(path).metadata.row_group(0)
    assert chunk.column(0).is_stats_set and chunk.column(2).is_stats_set
    assert not chunk.column(1).is_stats_set
    for pushdown in ("true", "false"):
        spark.conf.set("spark.sql.parquet.filterPushdown", pushdown)
        try:
            found = spark.read.parquet(path).where("x = double('NaN')").select("id").collect()
        finally:
            spark.conf.unset("spark.sql.parquet.filterPushdown")
        assert [r.id for r in found] == [2], pushdown


def test_a_timestamp_at_the_end_of_year_9999_has_no_upper_bound(tmp_path) -> None:
    """Rounded up to milliseconds, the last microsecond of 9999 would be year 10000,
    which no reader parses: the file gets no upper bound for it (a lower one still)."""
    schema = pa.schema([("at", pa.timestamp("us", tz="UTC"))])
    last = dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC)
    (f,) = write_arrow(pa.table({"at": [last]}, schema=schema), str(tmp_path / "t"),
                       schema=schema, prefix="a")  # fmt: skip
    stats = json.loads(f.stats)
    assert stats["minValues"] == {"at": "9999-12-31T23:59:59.999Z"}
    assert stats["maxValues"] == {}


def test_a_timestamp_before_year_1000_has_a_four_digit_year(tmp_path) -> None:
    schema = pa.schema([("at", pa.timestamp("us", tz="UTC"))])
    early = dt.datetime(999, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    (f,) = write_arrow(pa.table({"at": [early]}, schema=schema), str(tmp_path / "t"),
                       schema=schema, prefix="a")  # fmt: skip
    stats = json.loads(f.stats)
    assert stats["minValues"] == stats["maxValues"] == {"at": "0999-01-02T03:04:05.000Z"}


def test_small_decimals_have_bounds_in_plain_digits_that_filters_use(tmp_path) -> None:
    """0 in a DECIMAL(14,7) (Spark's AVG of a DECIMAL(10,3)) is 0.0000000, not 0E-7,
    which delta-rs reads as no bound: its filtered reads skipped the file."""
    schema = pa.schema([("k", pa.int64()), ("d", pa.decimal128(14, 7))])
    data = pa.table({"k": [1, 2], "d": [decimal.Decimal(-1), decimal.Decimal(0)]}, schema=schema)
    path = str(tmp_path / "t")
    TableSink(path, schema, layout=["k"], app_id="t", metadata={}).commit(
        1, Replace(data), metadata={}, expected_version=None
    )
    (f,) = pa.table(DeltaTable(path).get_add_actions(flatten=True)).to_pylist()
    assert (f["min.d"], f["max.d"]) == (decimal.Decimal(-1), decimal.Decimal(0))
    for value in (-1, 0):
        found = (
            DeltaTable(path)
            .to_pyarrow_dataset()
            .to_table(filter=pc.field("d") == pa.scalar(decimal.Decimal(value), schema[1].type))
        )
        assert found.num_rows == 1, value


def test_booleans_have_bounds_that_filters_use(tmp_path) -> None:
    """delta-rs' pyarrow dataset skipped a file for a filter on a column without bounds."""
    schema = pa.schema([("k", pa.int64()), ("flag", pa.bool_())])
    path = str(tmp_path / "t")
    sink = TableSink(path, schema, layout=["k"], app_id="t", metadata={}, target_file_rows=2)
    data = pa.table({"k": [1, 2, 3, 4], "flag": [False, False, True, None]}, schema=schema)
    sink.commit(1, Replace(data), metadata={}, expected_version=None)
    files = sorted(pa.table(DeltaTable(path).get_add_actions(flatten=True)).to_pylist(),
                   key=lambda f: f["min.k"])  # fmt: skip
    assert [(f["min.flag"], f["max.flag"]) for f in files] == [(False, False), (True, True)]
    dataset = DeltaTable(path).to_pyarrow_dataset()
    assert dataset.to_table(filter=pc.field("flag")).column("k").to_pylist() == [3]
    assert dataset.to_table(filter=~pc.field("flag")).num_rows == 2


def test_a_date_past_year_9999_is_written_without_bounds(tmp_path) -> None:
    schema = pa.schema([("day", pa.date32())])
    days = pa.array([2_932_897, -800_000], pa.int32()).cast(pa.date32())  # 10000-01-01, ...
    (f,) = write_arrow(pa.table({"day": days}), str(tmp_path / "t"), schema=schema, prefix="a")
    stats = json.loads(f.stats)
    assert stats["minValues"] == stats["maxValues"] == {}
    assert stats["nullCount"] == {"day": 0}


def test_write_arrow_checks_columns_and_nullability(tmp_path) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    with pytest.raises(DeltaMVError, match="no column 'id'"):
        write_arrow(pa.table({"x": [1]}), str(tmp_path / "t"), schema=schema, prefix="a")
    with pytest.raises(DeltaMVError, match="NOT NULL"):
        write_arrow(pa.table({"id": [1, None]}), str(tmp_path / "t"), schema=schema, prefix="a")
    with pytest.raises(ValueError, match="prefix"):
        write_arrow(pa.table({"id": [1]}), str(tmp_path / "t"), schema=schema, prefix="../a")


def test_spark_to_arrow_matches_what_the_files_hold(spark: SparkSession) -> None:
    df = spark.createDataFrame(all_types_rows(1), ALL_TYPES_DDL)
    assert spark_to_arrow(df.schema) == ALL_TYPES
