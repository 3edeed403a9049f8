from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from chispa import assert_df_equality
from pyspark.errors import PySparkException

from deltamv.changelog.snapshot import read_snapshot_ts, snapshot_arrow, snapshot_tables
from deltamv.errors import BadRecordError, ConfigError, DeltaMVError
from deltamv.errors import unwire as bad_record_from_exception
from tests.helpers.changelog import TABLES


def make_snapshot(root: Path, ts: int = 42) -> Path:
    snap = root / "snapshot"
    (snap / "accounts").mkdir(parents=True)
    (snap / "_snapshot.json").write_text(json.dumps({"ts": ts}))
    lines = [{"id": 1, "owner": "ann", "balance": 10}, {"id": 2, "owner": None}]
    (snap / "accounts" / "part-0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    pq.write_table(
        pa.table({"id": pa.array([3], pa.int32()), "balance": [30]}),  # widened to BIGINT
        snap / "accounts" / "part-1.parquet",
    )
    (snap / "accounts" / "_SUCCESS").write_text("")
    return snap


def test_snapshot_ts(tmp_path: Path) -> None:
    assert read_snapshot_ts(str(make_snapshot(tmp_path, ts=7 << 18))) == 7 << 18


@pytest.mark.parametrize("text", ['{"ts": "1"}', "[]", "{", '{"ts": -1}'])
def test_bad_snapshot_ts(tmp_path: Path, text: str) -> None:
    (tmp_path / "_snapshot.json").write_text(text)
    with pytest.raises(BadRecordError, match=r"_snapshot\.json"):
        read_snapshot_ts(str(tmp_path))


def test_missing_snapshot_json(tmp_path: Path) -> None:
    with pytest.raises(DeltaMVError, match=r"^job\.snapshot: .* has no _snapshot\.json$"):
        read_snapshot_ts(str(tmp_path))


def test_a_snapshot_folder_not_there_or_a_file_names_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^job\.snapshot: snapshot .*/gone does not exist$"):
        read_snapshot_ts(str(tmp_path / "gone"))
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match=r"^job\.snapshot: snapshot .*/file is not a folder$"):
        read_snapshot_ts(str(tmp_path / "file"))


def test_snapshot_arrow_reads_jsonl_and_parquet_and_missing_tables_as_empty(tmp_path: Path) -> None:
    snap = make_snapshot(tmp_path)
    (snap / "orders").mkdir()
    (snap / "orders" / "o.jsonl").write_text(
        json.dumps({"id": 1, "amount": 2.5, "day": "2024-01-01", "at": "2024-01-01T00:00:00Z"})
        + "\n"
    )
    tables = snapshot_arrow(str(snap), {**TABLES, "empty": TABLES["accounts"]})
    assert tables["accounts"].schema == TABLES["accounts"].to_arrow()
    assert tables["accounts"].to_pylist() == [
        {"id": 1, "owner": "ann", "balance": 10},
        {"id": 2, "owner": None, "balance": None},
        {"id": 3, "owner": None, "balance": 30},
    ]
    [order] = tables["orders"].to_pylist()
    assert order["amount"] == Decimal("2.50") and order["day"] == dt.date(2024, 1, 1)
    assert tables["empty"].num_rows == 0


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ({"id": "x"}, "column 'id'"),
        ({"owner": "x"}, "NOT NULL"),
        ({"id": 1, "zip": 1}, "unknown column"),
    ],
)
def test_bad_snapshot_jsonl_line(tmp_path: Path, row: dict[str, Any], reason: str) -> None:
    snap = make_snapshot(tmp_path)
    bad = snap / "accounts" / "part-2.jsonl"
    bad.write_text(json.dumps({"id": 9}) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(BadRecordError, match=reason) as info:
        snapshot_arrow(str(snap), TABLES)
    assert (info.value.file, info.value.line) == (str(bad), 2)


def test_bad_snapshot_parquet(tmp_path: Path) -> None:
    snap = make_snapshot(tmp_path)
    bad = snap / "accounts" / "part-2.parquet"
    pq.write_table(pa.table({"id": ["x"]}), bad)
    with pytest.raises(BadRecordError, match="'id'") as info:
        snapshot_arrow(str(snap), TABLES)
    assert info.value.file == str(bad)


def test_snapshot_tables_in_spark(spark: Any, tmp_path: Path) -> None:
    snap = make_snapshot(tmp_path)
    frames = snapshot_tables(spark, str(snap), TABLES)
    expected = spark.createDataFrame(
        [(1, "ann", 10), (2, None, None), (3, None, 30)], "id BIGINT, owner STRING, balance BIGINT"
    )
    assert_df_equality(frames["accounts"], expected, ignore_row_order=True, ignore_nullable=True)
    assert frames["orders"].count() == 0
    assert frames["orders"].schema.fieldNames() == TABLES["orders"].names


def test_snapshot_tables_bad_line_in_spark(spark: Any, tmp_path: Path) -> None:
    snap = make_snapshot(tmp_path)
    bad = snap / "accounts" / "part-2.jsonl"
    bad.write_text("{oops\n")
    with pytest.raises(PySparkException) as info:
        snapshot_tables(spark, str(snap), TABLES)["accounts"].collect()
    err = bad_record_from_exception(info.value)
    assert err is not None and (err.file, err.line) == (str(bad), 1)
