from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from deltamv.config import load_config
from deltamv.sim import WORKLOADS, SimulationError, Truth, large_txn_summary, simulate
from deltamv.sim.conformance import assert_conforms


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(folder)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


@pytest.mark.parametrize("workload", WORKLOADS)
def test_every_workload_writes_a_conforming_log_a_loadable_config_and_truth(
    workload: str, tmp_path: Path
) -> None:
    result = simulate(workload, tmp_path / "run", seed=3, txns=400, splits=3, large_every=100)
    config = load_config(result.config_path)
    assert config.name == workload and config.invariants
    assert Path(config.changelog) == (tmp_path / "run" / "changelog").resolve()
    assert_conforms(result.changelog, truth=result.out)
    truth = Truth.load(result.out)
    assert len(truth.transactions) == result.transactions > 100
    assert truth.commit_timestamps() == sorted(truth.commit_timestamps())
    final = truth.tables_at(result.final_watermark)
    assert set(final) == set(config.tables)
    for name, table in final.items():
        assert table.schema == config.tables[name].schema.to_arrow()


def test_same_arguments_give_byte_identical_output(tmp_path: Path) -> None:
    kwargs = dict(seed=11, txns=300, splits=2, format="mixed", snapshot_at=0.5, duplicate_rate=0.05)
    simulate("bank", tmp_path / "a", **kwargs)
    simulate("bank", tmp_path / "b", **kwargs)
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    simulate("bank", tmp_path / "a", **kwargs)  # the same run again into its folder: replaced
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    simulate("bank", tmp_path / "c", **{**kwargs, "seed": 12})
    assert _digest(tmp_path / "a") != _digest(tmp_path / "c")


def test_bank_money_is_conserved_at_every_commit(tmp_path: Path) -> None:
    result = simulate("bank", tmp_path / "run", seed=5, txns=600, large_every=150, accounts=200)
    truth = Truth.load(result.out)
    totals = set()
    for ts in [*truth.commit_timestamps()[::25], result.final_watermark]:
        accounts = truth.tables_at(ts)["accounts"]
        totals.add((sum(accounts.column("balance").to_pylist()), accounts.num_rows))
        assert min(accounts.column("balance").to_pylist()) >= 0
    assert totals == {(200 * 1000, 200)}
    moved = [t for t in truth.transactions if any(r.op == "DELETE" for r in t.rows)]
    assert moved, "expected some primary-key changes (DELETE old key + PUT new key)"


def test_orders_are_paid_only_once_and_never_above_the_ordered_total(tmp_path: Path) -> None:
    result = simulate("orders", tmp_path / "run", seed=2, txns=500)
    truth = Truth.load(result.out)
    for ts in truth.commit_timestamps()[::20]:
        tables = truth.tables_at(ts)
        orders, payments = tables["orders"].to_pylist(), tables["payments"].to_pylist()
        paid = {o["id"] for o in orders if o["status"] == "paid"}
        assert sorted(p["order_id"] for p in payments) == sorted(paid)
        assert sum(p["amount"] for p in payments) <= sum(o["amount"] for o in orders)


def test_authors_posts_always_have_an_author(tmp_path: Path) -> None:
    result = simulate("authors", tmp_path / "run", seed=4, txns=600)
    truth = Truth.load(result.out)
    for ts in truth.commit_timestamps()[::20]:
        tables = truth.tables_at(ts)
        authors = set(tables["authors"].column("id").to_pylist())
        assert set(tables["posts"].column("author_id").to_pylist()) <= authors


def test_start_ts_mode_holds_the_watermark_for_the_whole_prewrite_phase(tmp_path: Path) -> None:
    runs = {
        mode: simulate("bank", tmp_path / mode, seed=1, txns=1000, watermark_mode=mode)
        for mode in ("start-ts", "min-commit-ts")
    }
    held = {mode: large_txn_summary(r) for mode, r in runs.items()}
    assert held["start-ts"]["large_txns"] >= 2
    # start-ts: the watermark stays at or below the large txn's start ts while it prewrites
    assert held["start-ts"]["held_ms"] >= 0.9 * held["start-ts"]["prewrite_ms"]
    # min-commit-ts: it moves on after the first heartbeat or so
    assert held["min-commit-ts"]["held_ms"] <= 0.25 * held["min-commit-ts"]["prewrite_ms"]
    assert held["min-commit-ts"]["max_lag_ms"] < held["start-ts"]["max_lag_ms"]


def test_snapshot_holds_the_state_at_its_ts(tmp_path: Path) -> None:
    import json

    import pyarrow.parquet as pq

    result = simulate("bank", tmp_path / "run", seed=8, txns=300, snapshot_at=0.4)
    snap = tmp_path / "run" / "snapshot"
    ts = json.loads((snap / "_snapshot.json").read_text())["ts"]
    assert ts == result.snapshot_ts == Truth.load(result.out).snapshot_ts
    expected = Truth.load(result.out).tables_at(ts)
    for name, table in expected.items():
        assert pq.read_table(snap / name / "part-00000.parquet").equals(table)
    assert load_config(result.config_path).snapshot == str(snap.resolve())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(workload="nope"), "unknown workload"),
        (dict(txns=-1), "txns must be"),
        (dict(regions=0), "regions must be"),
        (dict(splits=-2), "splits must be"),
        (dict(watermark_mode="latest"), "unknown watermark mode"),
        (dict(snapshot_at=1.5), "snapshot_at must be"),
        (dict(duplicate_rate=2), "duplicate_rate must be"),
        (dict(colour="red"), "unknown option"),
        (dict(format="csv"), "unknown format"),
        (dict(accounts=0), "accounts must be"),
    ],
)
def test_bad_arguments_raise_a_one_line_error(kwargs: dict, message: str, tmp_path: Path) -> None:
    args = {"workload": "bank", "out": tmp_path / "run", "txns": 10, **kwargs}
    with pytest.raises(SimulationError, match=message) as info:
        simulate(**args)
    assert "\n" not in str(info.value)


def test_an_output_folder_holding_something_else_is_refused(tmp_path: Path) -> None:
    simulate("bank", tmp_path / "run", txns=20)
    with pytest.raises(SimulationError, match="different simulator run"):
        simulate("bank", tmp_path / "run", txns=21)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(SimulationError, match="not empty"):
        simulate("bank", tmp_path / "other", txns=20)


def test_live_mode_publishes_segments_while_it_runs(tmp_path: Path) -> None:
    result = simulate("bank", tmp_path / "live", live=True, duration=1.2, rate=300, seed=1)
    segments = list((tmp_path / "live" / "changelog").rglob("*.jsonl"))
    assert len(segments) >= 8  # flushed every ~200 ms per region, not once at the end
    assert result.transactions > 100
    assert_conforms(result.changelog, truth=result.out)
