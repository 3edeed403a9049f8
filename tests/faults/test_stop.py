"""Stop a running job (docs/guarantees.md, "Running"): Ctrl-C or SIGTERM to a continuous
``deltamv run`` while a batch runs, then run it again. The stop exits 0 with deltamv's
lines only (no Java stack trace, no Python traceback), leaves no process behind, and the
batch it cut short is replayed: every version of every view matches the truth.

The stop lands in the middle of a batch that calls into the JVM (a view Spark recomputes),
where Spark interrupts the batch: the driver runs with a batch that first waits a few
seconds (announcing itself on stderr), and the signal comes then.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from deltamv.config import load_config

from .harness import ROOT, KillHarness, _kill_group

# The driver, with each batch starting late; then ``deltamv`` as the command line runs it.
_SLOW_BATCHES = """
import sys, time
from deltamv.job import batch

run = batch.BatchRunner.run

def slow(self, batch_id):
    print(f"batch {batch_id} starts", file=sys.stderr, flush=True)
    time.sleep(4)
    return run(self, batch_id)

batch.BatchRunner.run = slow
from deltamv.cli import main
sys.exit(main())
"""

_RECOMPUTED = """
[views.ranked]
sql = "SELECT id, balance, RANK() OVER (ORDER BY balance DESC, id) AS place FROM accounts"
path = "out/views/ranked"
"""


@pytest.mark.parametrize(
    ("signum", "to_group"),
    [
        pytest.param(signal.SIGINT, False, id="ctrl-c"),
        pytest.param(signal.SIGTERM, True, id="sigterm-to-the-process-group"),
    ],
)
def test_a_stop_mid_batch_is_quiet_exits_0_and_the_batch_is_replayed(
    spark: Any, tmp_path: Path, signum: int, to_group: bool
) -> None:
    harness = KillHarness.create(
        tmp_path, seed=3, txns=120, segment_events=60, segments_per_batch=1000
    )
    config = harness.config_path
    text = config.read_text()
    config.write_text(text.replace("[invariants.", _RECOMPUTED + "\n[invariants.", 1))
    harness.sim.config = load_config(config)
    harness.publish(moves=2)

    env = dict(os.environ)
    env.pop("DELTAMV_CRASH_AT", None)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    log_path = tmp_path / "stopped.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-c", _SLOW_BATCHES, "run", str(config)], stdout=log,
            stderr=subprocess.STDOUT, env=env, cwd=str(harness.sim.job_dir),
            start_new_session=True,
        )  # fmt: skip
        try:
            end = time.monotonic() + 600
            while "batch 0 starts" not in log_path.read_text(errors="replace"):
                assert proc.poll() is None, log_path.read_text(errors="replace")[-3000:]
                assert time.monotonic() < end, "no batch started"
                time.sleep(0.2)
            time.sleep(1)  # inside the batch, before its view's recompute in Spark
            if to_group:
                os.killpg(proc.pid, signum)
            else:
                proc.send_signal(signum)
            rc = proc.wait(timeout=300)
            gone = _group_gone(proc.pid, timeout=60)
        finally:
            _kill_group(proc.pid)
    output = log_path.read_text(errors="replace")
    assert rc == 0, output[-3000:]
    assert "StackOverflowError" not in output, output[:3000]
    assert "Traceback" not in output and "\tat " not in output, output[-3000:]
    assert "stopped on request after" in output, output[-3000:]
    assert gone, "a process of the job's group outlived its driver"

    harness.sim.publish(len(harness.sim.pending))
    harness.round([])  # the rest, and the batch the stop cut short, clean
    result = harness.check(spark)
    assert result.versions >= len(harness.sim.config.views)


def _group_gone(pgid: int, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False
