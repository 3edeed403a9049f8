from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltamv.changelog.events import EVENT_SCHEMA
from deltamv.changelog.format import normalise_value, read_segment, values_to_arrow
from deltamv.changelog.segments import Segment, list_segments
from deltamv.errors import BadRecordError
from tests.helpers.changelog import TABLES, commit, put, resolved, write_segment

ORDER = {
    "id": 1,
    "amount": "12.5",
    "rate": 0.25,
    "small": -128,
    "paid": True,
    "day": "2024-02-29",
    "at": "2024-01-02T03:04:05.123456+02:00",
}


def only_segment(changelog: Path) -> Segment:
    [segment] = [s for segs in list_segments(str(changelog)).values() for s in segs]
    return segment


def read(changelog: Path) -> pa.Table:
    return read_segment(only_segment(changelog), TABLES)


def test_good_jsonl_segment(changelog: Path) -> None:
    events = [
        {"region": 4, "type": "INITIALIZED", "start_key": "a", "end_key": "", "parents": [1, 2]},
        {"region": 4, "type": "COMMITTED", "start_ts": 5, "commit_ts": 6, "table": "accounts",
         "key": "a1", "op": "PUT", "value": {"owner": "x", "id": 1, "balance": None}, "extra": 1},
        put(4, 10, "o1", ORDER, table="orders", primary="o1", large=True,
            old_value={"id": 1, "amount": 1.5}),
        {"region": 4, "type": "PREWRITE", "start_ts": 10, "table": "accounts", "key": "a1",
         "op": "DELETE", "old_value": None},
        commit(4, 10, 11, "o1", table="orders"),
        {"region": 4, "type": "ROLLBACK", "start_ts": 12, "table": "accounts", "key": "a2"},
        resolved(4, 11),
        {"region": 4, "type": "RETIRED"},
    ]  # fmt: skip
    write_segment(changelog, 4, 3, events)
    table = read(changelog)
    assert table.schema == EVENT_SCHEMA
    rows = table.to_pylist()
    assert [r["line"] for r in rows] == list(range(1, 9))
    assert {r["file"] for r in rows} == {str(changelog / "region-4" / "000003.jsonl")}
    assert {(r["region"], r["seq"]) for r in rows} == {(4, 3)}
    assert [r["type"] for r in rows] == [e["type"] for e in events]
    assert rows[0]["parents"] == [1, 2] and rows[0]["end_key"] == ""
    assert rows[1]["value"] == '{"balance":null,"id":1,"owner":"x"}'
    assert rows[1]["commit_ts"] == 6
    order = json.loads(rows[2]["value"])
    assert order["amount"] == "12.50"  # DECIMAL(10,2) normalised to its scale
    assert order["day"] == "2024-02-29" and order["at"] == ORDER["at"]
    assert rows[2]["primary"] == "o1" and rows[2]["large"] is True
    assert rows[2]["old_value"] is not None and json.loads(rows[2]["old_value"])["id"] == 1
    assert rows[3]["op"] == "DELETE" and rows[3]["value"] is None
    assert rows[4]["commit_ts"] == 11 and rows[4]["op"] is None
    assert rows[6]["ts"] == 11


def test_empty_segment(changelog: Path) -> None:
    write_segment(changelog, 1, 1, [])
    table = read(changelog)
    assert table.num_rows == 0 and table.schema == EVENT_SCHEMA


def test_last_line_without_newline_is_fine(changelog: Path) -> None:
    path = write_segment(changelog, 1, 1, [resolved(1, 1), resolved(1, 2)])
    path.write_text(path.read_text().rstrip("\n"))
    assert read(changelog).column("ts").to_pylist() == [1, 2]


VALID = resolved(1, 5)


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("not json", "not JSON"),
        ('{"region": 1, "type": "RESOLVED", "ts": 7', "not JSON"),  # truncated
        ("", "blank line"),
        ("[1, 2]", "not a JSON object"),
        ('{"region": 1, "type": "RESOLVED", "ts": NaN}', "not JSON"),
        ('{"region": 1, "type": "RESOLVED", "ts": 1} {"a": 1}', "extra data"),
        (json.dumps({"type": "RESOLVED", "ts": 1}), "'region'"),
        (json.dumps({"region": 2, "type": "RESOLVED", "ts": 1}), "region-1"),
        (json.dumps({"region": "1", "type": "RESOLVED", "ts": 1}), "region"),
        (json.dumps({"region": 1, "ts": 1}), "'type'"),
        (json.dumps({"region": 1, "type": "RESOLVE", "ts": 1}), 'unknown event type "RESOLVE"'),
        (json.dumps({"region": 1, "type": "RESOLVED"}), "'ts'"),
        (json.dumps({"region": 1, "type": "RESOLVED", "ts": "9"}), "'ts'"),
        (json.dumps({"region": 1, "type": "RESOLVED", "ts": True}), "'ts'"),
        (json.dumps({"region": 1, "type": "RESOLVED", "ts": -1}), "'ts'"),
        (json.dumps({"region": 1, "type": "RESOLVED", "ts": 2**63}), "'ts'"),
        (json.dumps(commit(1, 10, 10, "a")), "commit_ts 10 is not greater than start_ts 10"),
        (json.dumps({**commit(1, 10, 11, "a"), "key": None}), "'key'"),
        (json.dumps({**commit(1, 10, 11, "a"), "table": 3}), "'table'"),
        (json.dumps({**commit(1, 10, 11, "a"), "table": "nope"}), "unknown table 'nope'"),
        (
            json.dumps({k: v for k, v in commit(1, 10, 11, "a").items() if k != "commit_ts"}),
            "'commit_ts'",
        ),
        (json.dumps({**put(1, 10, "a", {"id": 1}), "op": "UPSERT"}), 'unknown op "UPSERT"'),
        (json.dumps({**put(1, 10, "a", {"id": 1}), "op": None}), "'op'"),
        (json.dumps({**put(1, 10, "a", {"id": 1}), "value": None}), "'value'"),
        (json.dumps(put(1, 10, "a", [1])), "not a JSON object"),
        (json.dumps(put(1, 10, "a", {"id": 1, "colour": "red"})), "unknown column 'colour'"),
        (json.dumps(put(1, 10, "a", {"id": "1"})), "column 'id'"),
        (json.dumps(put(1, 10, "a", {"id": 1.5})), "column 'id'"),
        (json.dumps(put(1, 10, "a", {"id": True})), "column 'id'"),
        (json.dumps(put(1, 10, "a", {"id": 2**63})), "column 'id'"),
        (json.dumps(put(1, 10, "a", {"owner": "x"})), "'id' is NOT NULL"),
        (json.dumps(put(1, 10, "a", {"id": None})), "'id' is NOT NULL"),
        (json.dumps(put(1, 10, "a", {"id": 1, "owner": 5})), "column 'owner'"),
        (json.dumps(put(1, 10, "o", {"small": 128}, table="orders")), "column 'small'"),
        (json.dumps(put(1, 10, "o", {"id": 2**31}, table="orders")), "column 'id'"),
        (json.dumps(put(1, 10, "o", {"amount": "12.345"}, table="orders")), "column 'amount'"),
        # below the scale's last place: rounding it to 0.00 is rounding too
        (json.dumps(put(1, 10, "o", {"amount": "0.001"}, table="orders")), "without rounding"),
        (json.dumps(put(1, 10, "o", {"amount": "-0.004"}, table="orders")), "without rounding"),
        (json.dumps(put(1, 10, "o", {"amount": 1e-7}, table="orders")), "without rounding"),
        (json.dumps(put(1, 10, "o", {"amount": 123456789.5}, table="orders")), "column 'amount'"),
        (json.dumps(put(1, 10, "o", {"amount": "1,5"}, table="orders")), "column 'amount'"),
        (json.dumps(put(1, 10, "o", {"amount": True}, table="orders")), "column 'amount'"),
        (json.dumps(put(1, 10, "o", {"rate": "0.5"}, table="orders")), "column 'rate'"),
        (json.dumps(put(1, 10, "o", {"paid": 1}, table="orders")), "column 'paid'"),
        (json.dumps(put(1, 10, "o", {"day": "2023-02-29"}, table="orders")), "column 'day'"),
        (json.dumps(put(1, 10, "o", {"day": "20240101"}, table="orders")), "column 'day'"),
        (json.dumps(put(1, 10, "o", {"at": "yesterday"}, table="orders")), "column 'at'"),
        (json.dumps(put(1, 10, "o", {"at": 1700000000}, table="orders")), "column 'at'"),
        (json.dumps(put(1, 10, "a", {"id": 1}, old_value=[1])), "'old_value'"),
        (json.dumps(put(1, 10, "a", {"id": 1}, primary=1)), "'primary'"),
        (json.dumps(put(1, 10, "a", {"id": 1}, large="yes")), "'large'"),
        (json.dumps({"region": 1, "type": "INITIALIZED", "start_key": "a"}), "'end_key'"),
        (
            json.dumps(
                {
                    "region": 1,
                    "type": "INITIALIZED",
                    "start_key": "a",
                    "end_key": "b",
                    "parents": ["x"],
                }
            ),
            "'parents'",
        ),
    ],
)
def test_bad_record_names_file_line_and_reason(changelog: Path, line: str, reason: str) -> None:
    path = write_segment(changelog, 1, 1, [VALID, VALID, line, VALID])
    with pytest.raises(BadRecordError) as info:
        read(changelog)
    err = info.value
    assert (err.file, err.line) == (str(path), 3)
    assert reason in err.reason
    assert "\n" not in str(err)
    assert str(err).startswith(f"bad record at {path}:3: ")


def test_truncated_last_line(changelog: Path) -> None:
    path = write_segment(changelog, 1, 1, [VALID, VALID])
    path.write_text(path.read_text() + '{"region": 1, "ty')
    with pytest.raises(BadRecordError) as info:
        read(changelog)
    assert (info.value.file, info.value.line) == (str(path), 3)


def test_non_utf8_line(changelog: Path) -> None:
    path = write_segment(changelog, 1, 1, [VALID, VALID])
    path.write_bytes(path.read_bytes() + b'{"region": 1, "type": "\xff"}\n')
    with pytest.raises(BadRecordError, match="UTF-8") as info:
        read(changelog)
    assert info.value.line == 3


def _parquet(changelog: Path, table: pa.Table, region: int = 2, seq: int = 1) -> Path:
    folder = changelog / f"region-{region}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{seq:06d}.parquet"
    pq.write_table(table, path)
    return path


def test_good_parquet_segment_matches_jsonl(changelog: Path, tmp_path: Path) -> None:
    events: list[dict[str, Any]] = [
        {"region": 2, "type": "INITIALIZED", "start_key": "", "end_key": "m", "parents": [1]},
        put(2, 10, "o1", ORDER, table="orders"),
        commit(2, 10, 11, "o1", table="orders"),
        resolved(2, 11),
    ]
    columns: dict[str, list[Any]] = {
        name: [e.get(name) for e in events]
        for name in ("region", "type", "start_ts", "commit_ts", "ts", "table", "key", "op",
                     "start_key", "end_key", "parents")
    }  # fmt: skip
    columns["value"] = [json.dumps(e["value"]) if "value" in e else None for e in events]
    types = {"region": pa.int32(), "parents": pa.list_(pa.int64())}
    path = _parquet(
        changelog,
        pa.table({n: pa.array(v, types.get(n)) for n, v in columns.items()}),
    )
    from_parquet = read(changelog)
    other = tmp_path / "other"
    write_segment(other, 2, 1, events)
    from_jsonl = read(other)
    assert from_parquet.schema == EVENT_SCHEMA
    assert from_parquet.drop_columns(["file"]) == from_jsonl.drop_columns(["file"])
    assert set(from_parquet.column("file").to_pylist()) == {str(path)}


def test_parquet_without_type_column(changelog: Path) -> None:
    path = _parquet(changelog, pa.table({"region": [2], "ts": [5]}))
    with pytest.raises(BadRecordError, match="'type'") as info:
        read(changelog)
    assert (info.value.file, info.value.line) == (str(path), None)


def test_parquet_with_wrong_column_type(changelog: Path) -> None:
    path = _parquet(changelog, pa.table({"region": [2], "type": ["RESOLVED"], "ts": ["5"]}))
    with pytest.raises(BadRecordError, match="'ts'") as info:
        read(changelog)
    assert info.value.file == str(path)


def test_parquet_bad_row_names_row(changelog: Path) -> None:
    path = _parquet(
        changelog, pa.table({"region": [2, 2, 2], "type": ["RESOLVED", "RESOLVED", "RESOLVED"],
                             "ts": [1, None, 3]}),
    )  # fmt: skip
    with pytest.raises(BadRecordError, match="'ts'") as info:
        read(changelog)
    assert (info.value.file, info.value.line) == (str(path), 2)


def test_parquet_that_is_not_parquet(changelog: Path) -> None:
    (changelog / "region-2").mkdir()
    (changelog / "region-2" / "1.parquet").write_text("hello")
    with pytest.raises(BadRecordError, match="Parquet"):
        read(changelog)


def test_values_to_arrow_types_exactly() -> None:
    schema = TABLES["orders"]
    texts = [
        normalise_value(ORDER, schema),
        None,
        normalise_value({"id": 2, "amount": 99999999.99, "at": "2024-01-02T03:04:05Z"}, schema),
        normalise_value({"id": 3, "at": "2024-01-02 03:04:05"}, schema),
    ]
    table = values_to_arrow(texts, schema)
    assert table.schema == schema.to_arrow()
    rows = table.to_pylist()
    utc = dt.UTC
    assert rows[0] == {
        "id": 1,
        "amount": Decimal("12.50"),
        "rate": 0.25,
        "small": -128,
        "paid": True,
        "day": dt.date(2024, 2, 29),
        "at": dt.datetime(2024, 1, 2, 1, 4, 5, 123456, tzinfo=utc),
    }
    assert set(rows[1].values()) == {None}
    assert rows[2]["amount"] == Decimal("99999999.99")
    assert rows[2]["at"] == dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=utc)
    assert rows[3]["at"] == dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=utc)
    assert values_to_arrow(pa.array(texts[:2]), schema).num_rows == 2
