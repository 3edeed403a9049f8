from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from deltamv.pipeline.release import last_per_key

# A row version: (key, start_ts); its commit ts is a function of it (one commit per txn).
_versions = st.lists(
    st.tuples(st.sampled_from(["a", "b", "é", "", "a\x00"]), st.integers(1, 6)),
    min_size=0,
    max_size=30,
)


def _rows(versions: list[tuple[str, int]]) -> pa.Table:
    return pa.table(
        {
            "key": pa.array([k for k, _ in versions], pa.string()),
            "op": pa.array(["PUT" if s % 2 else "DELETE" for _, s in versions]),
            "commit_ts": pa.array([10 * s + 5 for _, s in versions], pa.int64()),
            "start_ts": pa.array([s for _, s in versions], pa.int64()),
            "n": pa.array(range(len(versions)), pa.int64()),  # which copy arrived first
        }
    )


@settings(max_examples=300, deadline=None)
@given(_versions)
def test_each_key_keeps_its_last_version_once_in_key_order(versions: list[tuple[str, int]]) -> None:
    rows = _rows(versions)
    last, count = last_per_key(rows)

    expected: dict[str, dict[str, object]] = {}
    for row in rows.to_pylist():  # the first copy of the highest (commit_ts, start_ts)
        held = expected.get(row["key"])
        if held is None or (row["commit_ts"], row["start_ts"]) > (
            held["commit_ts"],
            held["start_ts"],
        ):
            expected[row["key"]] = row
    want = [
        {k: v for k, v in expected[key].items() if k != "start_ts"}
        for key in sorted(expected, key=lambda k: k.encode())
    ]
    assert last.to_pylist() == want
    assert last.column_names == ["key", "op", "commit_ts", "n"]
    assert count == len(set(versions))


def test_chunked_input_and_an_empty_table() -> None:
    rows = _rows([("b", 1), ("a", 2), ("b", 3)])
    chunked = pa.concat_tables([rows.slice(0, 1), rows.slice(1)])
    last, count = last_per_key(chunked)
    assert last.column("key").to_pylist() == ["a", "b"]
    assert last.column("commit_ts").to_pylist() == [25, 35]
    assert count == 3
    empty, none = last_per_key(rows.slice(0, 0))
    assert (empty.num_rows, none) == (0, 0)


def test_distinct_keys_in_order_come_back_as_they_are() -> None:
    rows = _rows([("a", 1), ("b", 2), ("c", 3)])
    last, count = last_per_key(rows)
    assert last.to_pylist() == rows.drop_columns(["start_ts"]).to_pylist()
    assert count == 3
    # the same rows out of order are sorted by key
    last, _ = last_per_key(rows.take([2, 0, 1]))
    assert last.column("key").to_pylist() == ["a", "b", "c"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(1, 6), st.booleans()),
                max_size=20))  # fmt: skip
def test_a_key_changed_several_times_names_the_old_key_its_first_change_names(
    versions: list[tuple[str, int, bool]],
) -> None:
    """A key changed more than once in one batch: its last change names the primary key
    the key's row had before the batch, as the first change tells it (its old_value's,
    or a PUT's own), so a snapshot row the first change replaced is found whatever the
    later ones did to it (a DELETE without old_value, a primary key changed under the
    same key). A key changed once keeps its own."""

    def old_id(key: str, s: int, has_old: bool) -> int | None:
        return 100 * s if has_old else None  # a PUT's old_value or a DELETE's

    rows = _rows([(k, s) for k, s, _ in versions])
    ids = [10 * s + ord(k[0]) if s % 2 else None for k, s, _ in versions]  # a PUT's value
    rows = rows.append_column("id", pa.array(ids, pa.int64()))
    rows = rows.append_column("__old_id", pa.array([old_id(*v) for v in versions], pa.int64()))
    last, _ = last_per_key(rows)

    by_key: dict[str, list[dict[str, object]]] = {}
    # of copies of a version the first naming an old primary key counts (a successor
    # region's COMMITTED copy may lack the old_value its PREWRITE carried), else the first
    newest_first = sorted(
        rows.to_pylist(),
        key=lambda r: (-r["commit_ts"], -r["start_ts"], r["__old_id"] is None, r["n"]),
    )
    for row in newest_first:
        mine = by_key.setdefault(row["key"], [])
        if not mine or mine[-1]["start_ts"] != row["start_ts"]:  # copies count once
            mine.append(row)
    for row in last.to_pylist():
        newest = by_key[row["key"]]
        want, first = newest[0]["__old_id"], newest[-1]
        if len(newest) > 1 and first["__old_id"] is not None:
            want = first["__old_id"]
        elif len(newest) > 1 and first["op"] == "PUT":
            want = first["id"]
        assert row["__old_id"] == want, (row, newest)
        assert (row["op"], row["commit_ts"], row["n"]) == (
            newest[0]["op"], newest[0]["commit_ts"], newest[0]["n"])  # fmt: skip
