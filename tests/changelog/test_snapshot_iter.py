"""``snapshot.iter_snapshot`` (driver-side, streaming) against ``read_snapshot_file``."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from deltamv.changelog import snapshot
from deltamv.changelog.snapshot import iter_snapshot, read_snapshot_file, snapshot_files
from deltamv.errors import BadRecordError
from deltamv.schema import TableSchema

from .batchgen import MUTATIONS, SETTINGS, TABLES, Raw, dumps, row_strategy

SCHEMA = TABLES["wide"]


def _expected(folder: Path, schema: TableSchema) -> pa.Table | BadRecordError:
    try:
        parts = [
            read_snapshot_file(p, schema) for p in snapshot_files(str(folder.parent), folder.name)
        ]
    except BadRecordError as e:
        return e
    return pa.concat_tables(parts) if parts else schema.to_arrow().empty_table()


def check_same_snapshot(folder: Path, schema: TableSchema = SCHEMA, batch_rows: int = 3) -> None:
    expected = _expected(folder, schema)
    got: list[pa.RecordBatch] = []
    try:
        for b in iter_snapshot(str(folder.parent), folder.name, schema, batch_rows=batch_rows):
            assert b.schema == schema.to_arrow()
            assert b.num_rows <= batch_rows
            got.append(b)
    except BadRecordError as e:
        assert isinstance(expected, BadRecordError), f"rejected what the reference accepts: {e}"
        assert (e.file, e.line, e.reason) == (expected.file, expected.line, expected.reason)
        return
    assert not isinstance(expected, BadRecordError), f"accepted, reference says {expected}"
    table = pa.Table.from_batches(got, schema=schema.to_arrow())
    assert table.to_pylist() == expected.to_pylist()


@pytest.fixture(autouse=True)
def _small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snapshot, "_CHUNK_BYTES", 200)


@SETTINGS
@given(
    files=st.lists(
        st.tuples(
            st.lists(row_strategy(SCHEMA), max_size=8), st.sampled_from(["jsonl", "parquet"])
        ),
        max_size=3,
    ),
    final_newline=st.booleans(),
)
def test_valid_snapshots_match_the_reference(
    tmp_path: Path, files: list[tuple[list[dict[str, Any]], str]], final_newline: bool
) -> None:
    folder = Path(tempfile.mkdtemp(dir=tmp_path)) / "wide"
    folder.mkdir()
    for i, (rows, fmt) in enumerate(files):
        if fmt == "jsonl":
            text = "\n".join(dumps(r) for r in rows) + ("\n" if final_newline and rows else "")
            (folder / f"part-{i}.jsonl").write_text(text)
        else:
            plain = [
                {k: (json.loads(v.text) if isinstance(v, Raw) else v) for k, v in r.items()}
                for r in rows
            ]
            typed = read_snapshot_file(_jsonl(folder / f".tmp-{i}.jsonl", plain), SCHEMA)
            pq.write_table(typed, folder / f"part-{i}.parquet")
    check_same_snapshot(folder)


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


_VALUE_MUTATIONS = sorted(
    k
    for k in MUTATIONS
    if k.split()[0]
    in {
        "id",
        "i8",
        "i16",
        "i32",
        "f",
        "d",
        "amount",
        "big",
        "s",
        "b",
        "day",
        "at",
        "bin",
        "undeclared",
    }
)
_LINE_MUTATIONS = [
    "blank line",
    "spaces only",
    "not json",
    "truncated",
    "two objects",
    "object then null",
    "array",
    "null",
    "bom",
    "trailing comma",
    "nan field",
]


@SETTINGS
@given(
    rows=st.lists(row_strategy(SCHEMA), min_size=1, max_size=8),
    where=st.integers(0, 20),
    mutation=st.sampled_from(_VALUE_MUTATIONS + _LINE_MUTATIONS),
)
def test_corrupted_jsonl_snapshots_fail_like_the_reference(
    tmp_path: Path, rows: list[dict[str, Any]], where: int, mutation: str
) -> None:
    folder = Path(tempfile.mkdtemp(dir=tmp_path)) / "wide"
    folder.mkdir()
    lines = [dumps(r) for r in rows]
    if mutation in _LINE_MUTATIONS:
        bad = MUTATIONS[mutation]({"id": 1})
    else:
        bad = MUTATIONS[mutation]({"value": {"id": 1}})
        bad = {**bad["value"]} if isinstance(bad, dict) else bad
    lines.insert(where % (len(lines) + 1), bad.text if isinstance(bad, Raw) else dumps(bad))
    (folder / "part-0.jsonl").write_text("\n".join(lines) + "\n")
    check_same_snapshot(folder)


def test_parquet_snapshot_errors_like_the_reference(tmp_path: Path) -> None:
    cases = [
        pa.table({"id": [1, 2, None, 4]}),
        pa.table({"id": [1], "colour": ["red"]}),
        pa.table({"s": ["x"]}),
        pa.table({"id": [1, 2, 3], "i8": [1, 300, 2]}),
        pa.table(
            {"id": [1, 2, 3, 4, 5], "i8": [1, 2, 3, 4, 300], "b": ["x", None, None, None, None]}
        ),
        pa.table({"id": pa.array([2**63], pa.uint64())}),
    ]
    for i, table in enumerate(cases):
        folder = tmp_path / f"case{i}" / "wide"
        folder.mkdir(parents=True)
        pq.write_table(table, folder / "part-0.parquet", row_group_size=2)
        check_same_snapshot(folder)
    folder = tmp_path / "broken" / "wide"
    folder.mkdir(parents=True)
    (folder / "part-0.parquet").write_text("hello")
    check_same_snapshot(folder)


def test_a_snapshot_decimal_below_the_scales_last_place_is_a_bad_record(tmp_path: Path) -> None:
    folder = tmp_path / "wide"
    folder.mkdir()
    path = folder / "a.jsonl"
    path.write_text(
        dumps({"id": 1, "amount": "1.50"}) + "\n" + dumps({"id": 2, "amount": "0.001"}) + "\n"
    )
    with pytest.raises(BadRecordError) as raised:
        list(iter_snapshot(str(tmp_path), "wide", SCHEMA))
    assert str(raised.value).startswith(f"bad record at {path}:2: ")
    assert "without rounding" in str(raised.value)
    check_same_snapshot(folder)


def test_missing_table_is_empty(tmp_path: Path) -> None:
    assert list(iter_snapshot(str(tmp_path), "wide", SCHEMA)) == []


def test_clean_files_do_not_need_the_reference_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "wide"
    folder.mkdir()
    rows = [
        {"id": i, "amount": f"{i}.25", "at": "2024-01-02T03:04:05+02:00", "bin": "YQ=="}
        for i in range(50)
    ]
    (folder / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    expected = read_snapshot_file(str(folder / "a.jsonl"), SCHEMA)
    pq.write_table(expected, folder / "b.parquet", row_group_size=7)

    def refuse(*args: Any) -> None:
        raise AssertionError("the reference path was used")

    monkeypatch.setattr(snapshot, "read_snapshot_file", refuse)
    got = pa.Table.from_batches(iter_snapshot(str(tmp_path), "wide", SCHEMA, batch_rows=10))
    assert got.to_pylist() == expected.to_pylist() * 2
