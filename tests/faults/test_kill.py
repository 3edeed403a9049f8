"""Kill anywhere (issue 5): SIGKILL a real ``deltamv run --once`` process, restart it, and
check every version of every view against the truth. The default suite lands a handful of
kills at the riskiest points; ``make kill-test`` lands 100 or more at random."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from deltamv.state.store import open_read_only

from .harness import KillHarness

OUT = Path(__file__).resolve().parents[2] / "demo-out" / "kill-test"


def test_killed_at_the_risky_points_and_restarted_nothing_lost_or_doubled(
    spark: Any, tmp_path: Path
) -> None:
    harness = KillHarness.create(
        tmp_path, seed=11, txns=240, splits=1, segment_events=120, segments_per_batch=4
    )  # fmt: skip
    # Between two views' commits; every table committed but the batch not finished; the
    # state finished it but Spark's commit log not written. Each run restarts the killed
    # one; the last one runs clean. (Timer kills, about 15-40 s each, are in kill_many.)
    harness.round(["point:after-commit:3", "point:before-finish:1", "point:after-finish:1"])
    harness.sim.publish(len(harness.sim.pending))
    harness.round([])
    assert harness.kills >= 3, harness.attempts
    result = harness.check(spark)
    assert result.versions >= len(harness.sim.config.views) * 2
    # What the runs after the kills found of the killed batches: one resumed the batch
    # the after-commit kill left half published (the state keeps its report); the clean
    # run found the batch the after-finish kill left finished, and said so.
    state = open_read_only(harness.sim.config.checkpoint)
    assert state is not None
    try:
        replays = [(b.report or {}).get("replay") for b in state.batches()]
    finally:
        state.close()
    assert "ingested" in replays, replays
    assert harness.logs is not None
    after = next(n + 1 for n, a in enumerate(harness.attempts)
                 if a.killed and a.mode == "point:after-finish:1")  # fmt: skip
    log = (harness.logs / f"attempt-{after:04d}.log").read_text()
    assert "finished by an earlier run (Spark replays it); nothing to do" in log, log[-2000:]


@pytest.mark.long
def test_kill_many(spark: Any, tmp_path: Path) -> None:
    """``make kill-test``: KILLS (default 100) random kills over a long simulated log."""
    target = int(os.environ.get("KILLS", "100"))
    seed = int(os.environ.get("KILL_SEED", "5"))
    harness = KillHarness.create(
        tmp_path, seed=seed, txns=max(2000, target * 150), splits=3, segment_events=80,
        segments_per_batch=6, watermark_mode="min-commit-ts", duplicate_rate=0.03,
        straggler_rate=0.2, max_per_round=3,
    )  # fmt: skip
    OUT.mkdir(parents=True, exist_ok=True)

    def progress(h: KillHarness) -> None:
        last = h.attempts[-1]
        print(
            f"kills {h.kills}/{target}  round {h.sim.runs}  last {last.mode} -> {last.returncode}",
            flush=True,
        )
        OUT.mkdir(parents=True, exist_ok=True)  # demo-out/ may be cleaned meanwhile
        (OUT / "progress.json").write_text(json.dumps(h.summary(), indent=1))

    per_round = int(os.environ.get("KILLS_PER_ROUND", "3"))
    harness.run_until(target, per_round=per_round, progress=progress)
    result = harness.check(spark)
    summary = {
        **harness.summary(),
        "versions_checked": result.versions,
        "views": result.views,
        "final_watermark": result.final_watermark,
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))
    assert harness.kills >= target, f"the simulated log ran out after {harness.kills} kills"
