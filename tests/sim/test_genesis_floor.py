from __future__ import annotations

import json
from pathlib import Path

import pytest

from deltamv.sim import simulate


@pytest.mark.parametrize("mode", ["start-ts", "min-commit-ts"])
def test_no_region_resolves_below_the_genesis_commit(tmp_path: Path, mode: str) -> None:
    # Every genesis secondary straggles: a region still holding a genesis lock must not
    # resolve at genesis's start ts, or a reader's first version would show empty tables.
    run = simulate(
        "bank", tmp_path / "run", seed=7, txns=50, straggler_rate=1.0, watermark_mode=mode
    )
    genesis_commit = min(t.commit_ts for t in run.truth().transactions)
    resolved = [
        json.loads(line)["ts"]
        for seg in sorted((run.out / "changelog").glob("region-*/*.jsonl"))
        for line in seg.read_text().splitlines()
        if '"RESOLVED"' in line
    ]
    assert resolved, "the run resolved nothing"
    assert min(resolved) >= genesis_commit
