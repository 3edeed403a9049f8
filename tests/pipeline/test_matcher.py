from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deltamv.compute import Compute
from deltamv.errors import BadRecordError
from deltamv.pipeline.ingest import IngestResult, ingest
from deltamv.pipeline.match import _rewritten
from deltamv.state import StateStore

from .events import commit, committed, group, init, prewrite, resolved, retired, rollback


def run(
    state: StateStore, batch: int, rows: list[dict[str, object]], *more: list[dict[str, object]]
) -> IngestResult:
    """One batch through matcher, frontier and buffer, in one state transaction; its
    events in one group, or in ``rows`` and then each of ``more``."""
    compute = Compute(threads=1, memory_limit="256MB")
    try:
        with state.transaction():
            return ingest(state, compute, batch, [group(g) for g in (rows, *more)])
    finally:
        compute.close()


def released(result: IngestResult) -> dict[str, object]:
    """Each released key's last change: (op, value of column v, commit ts)."""
    rows = result.changes.get("t")
    if rows is None:
        return {}
    return {
        r["key"]: (r["op"], {"v": r["v"]} if r["op"] == "PUT" and r["v"] is not None
                   else ({"id": r["id"]} if r["op"] == "PUT" else None), r["commit_ts"])
        for r in rows.to_pylist()
    }  # fmt: skip


@pytest.fixture
def state(tmp_path: Path) -> StateStore:
    return StateStore(tmp_path / "state.db", job="t", start_ts=0)


def test_first_commit_releases_the_whole_transaction_in_the_region(state: StateStore) -> None:
    # min-commit-ts mode: the region's watermark passes the transaction right after its
    # first COMMIT; the COMMITs of its other keys never come.
    rows = [
        init(1),
        prewrite(1, 10, "k1", {"id": 1}, large=True),
        prewrite(1, 10, "k2", {"id": 2}, large=True),
        prewrite(1, 10, "k3", None, large=True),
        commit(1, 10, 20, "k1"),
        resolved(1, 25),
    ]
    result = run(state, 0, rows)
    assert result.watermark == 25
    assert released(result) == {
        "k1": ("PUT", {"id": 1}, 20),
        "k2": ("PUT", {"id": 2}, 20),
        "k3": ("DELETE", None, 20),
    }


def test_straggling_and_duplicate_commits_add_nothing(state: StateStore) -> None:
    rows = [
        init(1),
        prewrite(1, 10, "a", {"v": 1}),
        prewrite(1, 10, "a", {"v": 1}),
        prewrite(1, 10, "b", {"v": 2}),
    ]
    rows += [
        commit(1, 10, 20, "a"),
        commit(1, 10, 20, "a"),
        resolved(1, 30),
        commit(1, 10, 20, "b"),
    ]
    assert len(released(run(state, 0, rows))) == 2
    # A straggler after the watermark passed (its bookkeeping pruned) is harmless too.
    assert run(state, 1, [commit(1, 10, 20, "b"), resolved(1, 31)]).released == 0


def test_rollback_and_retired_drop_pending_rows(state: StateStore) -> None:
    rows = [
        init(1, "", "m"),
        init(2, "m", ""),
        prewrite(1, 10, "a", {"v": 1}),
        rollback(1, 10, "a"),
    ]
    rows += [prewrite(2, 11, "x", {"v": 1}), retired(2), resolved(1, 50)]
    assert run(state, 0, rows).released == 0
    assert state.pending.count() == 0


def test_a_retransmitted_retired_is_harmless(state: StateStore) -> None:
    """Seen in a soak: a region's stream ended RETIRED, RETIRED (a retransmission), in
    one segment or across two batches."""
    rows = [init(1, "", "m"), init(2, "m", ""), retired(2), retired(2), resolved(1, 50)]
    run(state, 0, rows)
    run(state, 1, [retired(2)])
    assert state.regions()[2].retired


def test_rows_hold_until_the_global_watermark_passes(state: StateStore) -> None:
    first = [
        init(1, "", "m"),
        init(2, "m", ""),
        prewrite(1, 10, "a", {"v": 1}),
        commit(1, 10, 20, "a"),
    ]
    first += [resolved(1, 30), resolved(2, 15)]
    r0 = run(state, 0, first)
    assert (r0.watermark, r0.released) == (15, 0)
    r1 = run(state, 1, [resolved(2, 40)])
    assert (r1.watermark, r1.released) == (30, 1)


def test_reemitted_rows_below_the_applied_watermark_are_dropped(state: StateStore) -> None:
    first = [init(1), prewrite(1, 10, "a", {"v": 1}), commit(1, 10, 20, "a"), resolved(1, 30)]
    run(state, 0, first)
    # A successor re-emits the row (and one above the watermark) in its initial scan.
    second = [retired(1), committed(2, 10, 20, "a", {"v": 1}), committed(2, 12, 35, "b", {"v": 2})]
    second += [init(2, "", "", parents=[1]), resolved(2, 40)]
    r1 = run(state, 1, second)
    assert r1.watermark == 40
    assert released(r1) == {"b": ("PUT", {"v": 2}, 35)}


def test_a_primary_key_move_releases_both_keys(state: StateStore) -> None:
    # An update of the primary key is a DELETE of the old key and a PUT of the new one
    # in one transaction: both reach the mirrors (which remove before they insert).
    rows = [init(1), prewrite(1, 10, "z-new", {"id": 2}), prewrite(1, 10, "a-old", None)]
    rows += [commit(1, 10, 20, "z-new"), resolved(1, 30)]
    assert released(run(state, 0, rows)) == {
        "a-old": ("DELETE", None, 20), "z-new": ("PUT", {"id": 2}, 20),
    }  # fmt: skip


@pytest.mark.parametrize(
    ("rows", "reason"),
    [
        ([init(1), commit(1, 10, 20, "a")], "without its PREWRITE"),
        ([init(1), resolved(1, 30), resolved(1, 29)], "going backwards"),
        ([resolved(1, 30)], "before the region's INITIALIZED"),
        ([init(1), retired(1), resolved(1, 30)], "after the region's RETIRED"),
        ([init(1), retired(1), retired(1), committed(1, 10, 20, "a", {"v": 1})], "RETIRED"),
        (
            [init(1), prewrite(1, 10, "a", {"v": 1}), rollback(1, 10, "a"), commit(1, 10, 20, "a")],
            "after its ROLLBACK",
        ),
        # a transaction writes a key once: not a retransmission (the first row was kept)
        (
            [
                init(1),
                prewrite(1, 10, "a", {"v": 1}),
                prewrite(1, 10, "b", {"v": 1}),
                prewrite(1, 10, "a", {"v": 2}),
            ],
            "PREWRITE of key 'a' by transaction 10 again, with another row",
        ),
        (
            [
                init(1),
                prewrite(1, 10, "a", {"v": 1}),
                prewrite(1, 10, "a", {"v": 1}),
                prewrite(1, 10, "a", None),
            ],
            "PREWRITE of key 'a' by transaction 10 again, with another row",
        ),
    ],
)
def test_history_violations_are_bad_records_and_leave_no_trace(
    state: StateStore, rows: list[dict[str, object]], reason: str
) -> None:
    for i, row in enumerate(rows, start=1):
        row["line"] = i
    with pytest.raises(BadRecordError, match=reason) as info:
        run(state, 0, rows)
    assert info.value.line == len(rows)
    assert "region-1/000001.jsonl:" in str(info.value)
    assert state.progress().batch == -1
    assert state.regions() == {}


@pytest.mark.parametrize(
    ("values", "rewritten_at"),
    [
        ([1.5, 1.5, 1.5], None),  # retransmitted
        ([float("nan"), float("nan")], None),  # NaN is NaN here, as in SQL's grouping
        ([0.0, -0.0], None),  # and the two zeros are equal
        ([None, None], None),
        ([1.5, None], 1),
        ([None, 1.5], 1),
        ([float("nan"), 1.5], 1),
        ([1.5, 1.5, 2.5, 1.5], 2),
    ],
)
def test_a_prewrite_again_is_rewritten_only_with_another_row(
    values: list[float | None], rewritten_at: int | None
) -> None:
    # The rows arrive in another order than their events (``ev``), beside a key written
    # once with another value; the first by event position is the one that counts.
    n = len(values)
    evs = pa.chunked_array([pa.array([*(10 * i for i in reversed(range(n))), 5], pa.int64())])
    prewrites = pa.table({
        "region": [1] * (n + 1), "start_ts": [7] * (n + 1),
        "key": ["a"] * n + ["b"], "type": ["PREWRITE"] * (n + 1),
        "op": ["PUT"] * (n + 1), "v": pa.array([*reversed(values), 9.0], pa.float64()),
    })  # fmt: skip
    compute = Compute()
    try:
        found = _rewritten(compute, prewrites, evs)
    finally:
        compute.close()
    if rewritten_at is None:
        assert found is None
    else:
        assert found is not None and found.ev == 10 * rewritten_at
        assert "PREWRITE of key 'a' by transaction 7 again, with another row" in found.reason


# -- any legal interleaving gives the same released rows ---------------------------------
REGION_STREAMS = {
    1: [
        init(1, "", "m"),
        prewrite(1, 10, "a", {"v": 1}),
        prewrite(1, 10, "b", {"v": 2}),
        prewrite(1, 14, "c", {"v": 3}, large=True),
        commit(1, 10, 12, "a"),
        resolved(1, 13),
        prewrite(1, 16, "a", None),
        commit(1, 16, 18, "a"),
        commit(1, 10, 12, "b"),
        commit(1, 14, 21, "c"),
        resolved(1, 30),
        retired(1),
    ],
    2: [
        init(2, "m", ""),
        prewrite(2, 10, "x", {"v": 9}),
        resolved(2, 9),
        commit(2, 10, 12, "x"),
        prewrite(2, 17, "y", {"v": 5}),
        prewrite(2, 17, "y", {"v": 5}),
        rollback(2, 17, "y"),
        resolved(2, 28),
        prewrite(2, 24, "z", {"v": 6}),
        commit(2, 24, 29, "z"),
        resolved(2, 35),
    ],
    3: [  # successor of region 1, re-emitting what committed above its last resolved (13)
        committed(3, 16, 18, "a", None),
        committed(3, 14, 21, "c", {"v": 3}),
        init(3, "", "m", parents=[1]),
        resolved(3, 33),
    ],
}
FINAL = {"a": None, "b": {"v": 2}, "c": {"v": 3}, "x": {"v": 9}, "z": {"v": 6}}


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.large_base_example, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_any_interleaving_batching_grouping_and_retransmission_gives_the_same_result(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    state = StateStore(tmp_path_factory.mktemp("s") / "state.db", job="t", start_ts=0)
    streams = {}  # any event may be delivered twice in a row (a retransmission)
    for region, stream in REGION_STREAMS.items():
        twice = data.draw(st.lists(st.booleans(), min_size=len(stream), max_size=len(stream)))
        streams[region] = [e for e, dup in zip(stream, twice, strict=True) for e in [e] * (1 + dup)]
    cursors = dict.fromkeys(streams, 0)
    batch, final_state, watermarks = 0, {}, []
    while any(cursors[r] < len(s) for r, s in streams.items()):
        rows, later = [], []  # a batch in two groups: each region's first events, the rest
        for region, stream in streams.items():
            take = data.draw(st.integers(0, len(stream) - cursors[region]))
            first = data.draw(st.integers(0, take))
            rows += stream[cursors[region] : cursors[region] + first]
            later += stream[cursors[region] + first : cursors[region] + take]
            cursors[region] += take
        if not rows and not later:  # every region published nothing this round: let one move on
            region = next(r for r, s in streams.items() if cursors[r] < len(s))
            rows.append(streams[region][cursors[region]])
            cursors[region] += 1
        result = run(state, batch, *[g for g in (rows, later) if g])
        watermarks.append(result.watermark)
        for key, (op, value, commit_ts) in released(result).items():
            assert commit_ts <= result.watermark
            final_state[key] = value if op == "PUT" else None
        batch += 1
    assert watermarks == sorted(watermarks)
    assert watermarks[-1] == 33
    assert final_state == FINAL


def test_prewrite_after_rollback_in_the_same_batch_is_bad(state: StateStore) -> None:
    rows = [
        init(1),
        prewrite(1, 10, "a", {"v": 1}),
        rollback(1, 10, "a"),
        prewrite(1, 10, "b", {"v": 2}),
    ]
    for i, row in enumerate(rows, start=1):
        row["line"] = i
    with pytest.raises(BadRecordError, match="after its COMMIT or ROLLBACK") as info:
        run(state, 0, rows)
    assert info.value.line == 4
