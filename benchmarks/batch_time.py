"""Per-batch time of the view job on a fixed small-batch bank run.

The quick before/after check for changes to the per-batch path: a 3000-transaction
bank log, 8 segments per batch, one warm session; prints each committed batch's time
and the mean without the first (warm-up) batch. Prints, never asserts.

    .venv/bin/python benchmarks/batch_time.py
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import WORK, say

from deltamv.config import load_config
from deltamv.job import ViewJob
from deltamv.session import build_spark
from deltamv.sim import simulate


def main() -> None:
    run = WORK / "batch-time" / "bank"
    shutil.rmtree(run, ignore_errors=True)
    simulate("bank", run, seed=9, txns=3000)
    config_path = run / "config.toml"
    text = config_path.read_text().replace(
        'changelog = "changelog"', 'changelog = "changelog"\nmax_segments_per_batch = 8'
    )
    config_path.write_text(text)
    config = load_config(config_path)
    reports = ViewJob(config, build_spark(config)).run(once=True)
    times = [r.duration_ms for r in reports if r.committed]
    say(f"committed batches: {len(times)}; ms per batch: {times}")
    rest = times[1:] or times
    say(f"mean without the first batch: {sum(rest) // len(rest)} ms")


if __name__ == "__main__":
    main()
