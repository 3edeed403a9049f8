"""Stop a running job (docs/guarantees.md, "Running"): Ctrl-C or SIGTERM to a continuous
``deltamv run`` while a batch runs, then run it again. The stop exits 0 with deltamv's
lines only (no Java stack trace, no Python traceback), leaves no process behind, and the
batch it cut short is replayed: every version of every view matches the truth.

The stop lands in the middle of a batch that calls into the JVM (a view Spark recomputes),
where Spark interrupts the batch: the driver runs with a batch that first waits a few
seconds (announcing itself on stderr), and the signal comes then. It also announces
Spark's start, for a stop asked for while Spark starts (held until it has started), and a
second signal, which ends the job at once (exit 130) without waiting for the batch.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from deltamv.config import load_config

from .harness import ROOT, KillHarness, _kill_group

# The driver, with each batch starting late; then ``deltamv`` as the command line runs it.
_SLOW_BATCHES = """
import os, sys, time
from deltamv.job import batch

run = batch.BatchRunner.run

def slow(self, batch_id):
    print(f"batch {batch_id} starts", file=sys.stderr, flush=True)
    time.sleep(4)
    return run(self, batch_id)

batch.BatchRunner.run = slow

from deltamv import session

build = session.build_spark

def announced(config, **kw):
    print("spark starts", file=sys.stderr, flush=True)
    if os.environ.get("HANG_AT_START"):  # a start that never ends (a master not there)
        time.sleep(600)
    return build(config, **kw)

session.build_spark = announced
from deltamv.cli import main
sys.exit(main())
"""

_RECOMPUTED = """
[views.ranked]
sql = "SELECT id, balance, RANK() OVER (ORDER BY balance DESC, id) AS place FROM accounts"
path = "out/views/ranked"
"""


def test_sigterm_to_the_process_group_mid_batch_is_quiet_exits_0_and_the_batch_is_replayed(
    spark: Any, tmp_path: Path
) -> None:
    harness = _harness(tmp_path)
    _stop_mid_batch(harness, tmp_path / "stopped.log", signal.SIGTERM, to_group=True)
    harness.sim.publish(len(harness.sim.pending))
    harness.round([])  # the rest, and the batch the stop cut short, clean
    result = harness.check(spark)
    assert result.versions >= len(harness.sim.config.views)


def test_ctrl_c_while_spark_starts_then_mid_batch_then_twice(spark: Any, tmp_path: Path) -> None:
    harness = _harness(tmp_path)
    # Ctrl-C while Spark starts: the job stops once Spark has started, quietly (PySpark's
    # own handler, or a JVM whose start was cut short, would print traces).
    rc, output, _ = _signalled(harness, tmp_path / "starting.log", "spark starts", [signal.SIGINT])
    assert rc == 0, output[-3000:]
    assert "stopped on request before the job started" in output, output[-3000:]
    assert _working_in(harness.sim.job_dir) == [], "a process outlived the driver"

    # Ctrl-C in the middle of a batch: the job stops, quietly; the batch is replayed.
    _stop_mid_batch(harness, tmp_path / "stopped.log", signal.SIGINT, to_group=False)

    # A second Ctrl-C does not wait for the batch in progress: the job ends at once. (On
    # a loaded machine the stop above can come too late to cut its batch short, and the
    # batch is then done: the log's next move gives this run a batch either way.)
    assert harness.sim.pending, "the harness keeps a move of the log for this start"
    harness.publish(moves=1)
    rc, output, tree = _signalled(
        harness, tmp_path / "twice.log", r"batch \d+ starts", [signal.SIGINT, signal.SIGINT]
    )
    assert rc == 130, output[-3000:]
    assert "stopped at once (a second signal)" in output, output[-3000:]
    assert "stopped on request after" not in output, output[-3000:]  # it did not wait
    assert len(tree) > 2, tree  # the driver, its JVM, the JVM's Python workers

    harness.sim.publish(len(harness.sim.pending))
    harness.round([])  # the batch cut short, and the rest
    result = harness.check(spark)
    assert result.versions >= len(harness.sim.config.views)


def _stop_mid_batch(harness: KillHarness, log: Path, signum: int, *, to_group: bool) -> None:
    """Stop a continuous run with ``signum`` inside its first batch: exit 0, no trace,
    no process of its own left."""
    rc, output, tree = _signalled(
        harness, log, "batch 0 starts", [signum], settle=1, to_group=to_group
    )  # (settled inside the batch, before its view's recompute in Spark)
    assert rc == 0, output[-3000:]
    assert "StackOverflowError" not in output, output[:3000]
    assert "stopped on request after" in output, output[-3000:]
    assert len(tree) > 2, tree  # the driver, its JVM, the JVM's Python workers


def _signalled(
    harness: KillHarness,
    log: Path,
    line: str,
    signals: list[int],
    *,
    settle: float = 0,
    to_group: bool = False,
) -> tuple[int, str, set[tuple[int, str]]]:
    """Launch a continuous run, wait for ``line`` (and ``settle`` seconds), send
    ``signals`` half a second apart; its exit code, output and process tree at the first
    signal. Whatever the signals, no trace is printed and no process it started is left."""
    proc, log_path = _launch(harness, log)
    try:
        _wait_for(proc, log_path, line)
        time.sleep(settle)
        tree = _tree(proc.pid)
        # Spark's Python workers run without its daemon, which kept a process of each
        # kind (the source's lookup, creation and planning) alive for the whole run
        daemons = [c for c in _commands(tree) if "pyspark.daemon" in c]
        assert daemons == [], daemons
        for i, signum in enumerate(signals):
            time.sleep(0.5 if i else 0)
            if to_group:
                os.killpg(proc.pid, signum)
            else:
                proc.send_signal(signum)
        rc = proc.wait(timeout=300)
        gone = _group_gone(proc.pid, timeout=60)
    finally:
        _kill_group(proc.pid)
    output = log_path.read_text(errors="replace")
    assert "Traceback" not in output and "\tat " not in output, output[-3000:]
    assert gone, "a process of the job's group outlived its driver"
    assert _outlived(tree) == [], "a process the driver started outlived it"
    return rc, output, tree


def test_a_second_signal_ends_a_start_that_hangs(tmp_path: Path) -> None:
    """Spark starts on a thread of its own, and the main thread takes the signals: a
    second one ends a start that never returns (a master that is not there), at once."""
    harness = _harness(tmp_path)
    proc, log_path = _launch(harness, tmp_path / "hung.log", hang_at_start=True)
    try:
        _wait_for(proc, log_path, "spark starts")
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert proc.poll() is None  # the first waits for the start
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=30)
    finally:
        _kill_group(proc.pid)
    output = log_path.read_text(errors="replace")
    assert rc == 128 + signal.SIGTERM, output[-3000:]
    assert "stopped at once (a second signal)" in output, output[-3000:]
    assert "Traceback" not in output, output[-3000:]


def test_a_jvm_killed_mid_batch_is_one_line_and_the_next_run_resumes(
    spark: Any, tmp_path: Path
) -> None:
    """Spark's JVM killed (the out-of-memory killer's way) while a batch runs: one line
    saying so, exit 1, no traces (it read "storage failed: Connection refused", under
    py4j's and the accumulator server's tracebacks); the next run replays the batch."""
    harness = _harness(tmp_path)
    proc, log_path = _launch(harness, tmp_path / "jvm.log")
    try:
        _wait_for(proc, log_path, r"batch \d+ starts")
        [java] = [
            pid for pid, _ in _tree(proc.pid) if b"java" in Path(f"/proc/{pid}/comm").read_bytes()
        ]
        os.kill(java, signal.SIGKILL)
        rc = proc.wait(timeout=120)
    finally:
        _kill_group(proc.pid)
    output = log_path.read_text(errors="replace")
    assert rc == 1, output[-3000:]
    assert "Traceback" not in output and "\tat " not in output, output[-3000:]
    errors = [line for line in output.splitlines() if "error" in line.lower()]
    assert errors == [
        "deltamv: error: Spark's JVM is gone (it was killed, or crashed: the system log says"
        " whether the out-of-memory killer took it); run the job again, it resumes where it"
        " stopped"
    ], output[-3000:]
    harness.sim.publish(len(harness.sim.pending))
    harness.round([])
    assert harness.check(spark).versions >= len(harness.sim.config.views)


def _harness(tmp_path: Path) -> KillHarness:
    harness = KillHarness.create(
        tmp_path, seed=3, txns=120, segment_events=60, segments_per_batch=1000
    )
    config = harness.config_path
    text = config.read_text()
    config.write_text(text.replace("[invariants.", _RECOMPUTED + "\n[invariants.", 1))
    harness.sim.config = load_config(config)
    harness.publish(moves=1)  # (the log's other move is kept for a later start)
    return harness


def _launch(
    harness: KillHarness, log_path: Path, *, hang_at_start: bool = False
) -> tuple[subprocess.Popen[bytes], Path]:
    """A continuous ``deltamv run`` of ``harness``, in a process group of its own, with
    its output in ``log_path``."""
    env = dict(os.environ)
    env.pop("DELTAMV_CRASH_AT", None)
    if hang_at_start:
        env["HANG_AT_START"] = "1"
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-c", _SLOW_BATCHES, "run", str(harness.config_path)], stdout=log,
            stderr=subprocess.STDOUT, env=env, cwd=str(harness.sim.job_dir),
            start_new_session=True,
        )  # fmt: skip
    return proc, log_path


def _wait_for(proc: subprocess.Popen[bytes], log_path: Path, line: str) -> None:
    """Wait for the output to have ``line`` (a regular expression)."""
    end = time.monotonic() + 600
    while not re.search(line, output := log_path.read_text(errors="replace")):
        assert proc.poll() is None, output[-3000:]
        assert time.monotonic() < end, f"no {line!r}: {output[-3000:]}"
        time.sleep(0.05)


def _commands(tree: set[tuple[int, str]]) -> list[str]:
    """The command lines of the processes of ``tree`` still running."""
    found = []
    for pid, _ in tree:
        with contextlib.suppress(OSError):
            found.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
    return found


def _tree(pid: int) -> set[tuple[int, str]]:
    """The process ``pid`` and all its descendants, by pid and start time. Spark's
    Python daemon moves itself into a process group of its own: a group's end does not
    cover it."""
    parents: dict[int, list[int]] = {}
    started: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(entry.name))
        started[int(entry.name)] = fields[19]
    found, todo = set(), [pid]
    while todo:
        current = todo.pop()
        if current in started:
            found.add((current, started[current]))
        todo.extend(parents.get(current, []))
    return found


def _outlived(tree: set[tuple[int, str]], timeout: float = 30) -> list[int]:
    """The processes of ``tree`` still alive after ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while True:
        alive = []
        for pid, started in tree:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[19] == started and fields[0] != "Z":
                alive.append(pid)
        if not alive or time.monotonic() > end:
            return alive
        time.sleep(0.2)


def _working_in(folder: Path, timeout: float = 30) -> list[int]:
    """Processes whose working directory is ``folder`` after ``timeout`` seconds (a JVM
    whose start was cut short keeps running, outside the driver's tree)."""
    end = time.monotonic() + timeout
    while True:
        found = []
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and Path(os.readlink(entry / "cwd")) == folder.resolve():
                    found.append(int(entry.name))
            except OSError:
                continue
        if not found or time.monotonic() > end:
            return found
        time.sleep(0.2)


def _group_gone(pgid: int, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False
