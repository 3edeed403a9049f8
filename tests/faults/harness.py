"""Kill anywhere: run ``deltamv run CONFIG --once`` as a real process, SIGKILL it, restart.

A :class:`KillHarness` publishes a simulated change log round by round (regions
unevenly, as :class:`tests.job.simrun.SimJob` does). Per round it runs the job as a
subprocess until one run exits 0; runs before that are killed, either at a named crash
point (``DELTAMV_CRASH_AT``, :data:`deltamv.faults.POINTS`, the n-th pass) or by a timer
at a random moment (Spark's checkpoint write, a Delta commit, the SQLite transaction,
planning, anywhere). A kill takes the whole process group (driver, JVM, Python
workers), like a machine losing power. Afterwards :meth:`KillHarness.check` runs the
oracle: every version of every view is the view's SQL over the truth at its watermark,
no watermark or batch repeats, and the latest version has the global watermark.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deltamv import delta, faults

from ..job.simrun import SimJob

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Attempt:
    """One process run: how it was to be killed, and what happened."""

    round: int
    mode: str  # "point:<name>:<n>", "timer:<seconds>" or "clean"
    returncode: int
    seconds: float

    @property
    def killed(self) -> bool:
        return self.returncode == -signal.SIGKILL


@dataclass(frozen=True)
class CheckResult:
    versions: int
    views: int
    final_watermark: int


@dataclass
class KillHarness:
    sim: SimJob
    rng: random.Random
    timer_range: tuple[float, float] = (12.0, 45.0)
    timeout: float = 600.0
    attempts: list[Attempt] = field(default_factory=list)
    logs: Path | None = None

    @classmethod
    def create(
        cls, tmp: Path, *, seed: int, workload: str = "bank", segments_per_batch: int = 6,
        timer_range: tuple[float, float] = (12.0, 45.0), **sim: Any,
    ) -> KillHarness:  # fmt: skip
        job = SimJob.create(tmp, workload, seed=seed, segments_per_batch=segments_per_batch, **sim)
        logs = tmp / "logs"
        logs.mkdir()
        return cls(job, random.Random(seed), timer_range=timer_range, logs=logs)

    @property
    def config_path(self) -> Path:
        return self.sim.job_dir / "config.toml"

    @property
    def kills(self) -> int:
        return sum(a.killed for a in self.attempts)

    # -- running ------------------------------------------------------------------------
    def run_job(self, mode: str) -> Attempt:
        """One ``deltamv run --once`` process; ``mode`` says how to kill it (see Attempt)."""
        env = dict(os.environ)
        env.pop("DELTAMV_CRASH_AT", None)
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
        deadline: float | None = None
        if mode.startswith("point:"):
            _, name, nth = mode.split(":")
            env["DELTAMV_CRASH_AT"] = f"{name}:{nth}"
        elif mode.startswith("timer:"):
            deadline = float(mode.split(":")[1])
        n = len(self.attempts)
        assert self.logs is not None
        log_path = self.logs / f"attempt-{n:04d}.log"
        started = time.monotonic()
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "deltamv.cli", "run", str(self.config_path), "--once"],
                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(self.sim.job_dir),
                start_new_session=True,
            )  # fmt: skip
            try:
                rc = proc.wait(timeout=deadline if deadline is not None else self.timeout)
            except subprocess.TimeoutExpired:
                if deadline is None:
                    _kill_group(proc.pid)
                    proc.wait()
                    raise AssertionError(f"job hung for {self.timeout}s; log {log_path}") from None
                _kill_group(proc.pid)
                rc = proc.wait()
        _kill_group(proc.pid)  # the JVM and Python workers of a driver that killed itself
        _wait_group_gone(proc.pid)
        attempt = Attempt(self.sim.runs, mode, rc, time.monotonic() - started)
        self.attempts.append(attempt)
        if rc not in (0, -signal.SIGKILL):
            tail = log_path.read_text(errors="replace").strip().splitlines()[-5:]
            raise AssertionError(f"{mode}: exit {rc}; log {log_path}:\n" + "\n".join(tail))
        return attempt

    def random_mode(self) -> str:
        if self.rng.random() < 0.5:
            name = self.rng.choice(faults.POINTS)
            # after-commit is passed once per table per batch: reach the later ones too
            nth = self.rng.randint(1, 6 if name in ("after-commit", "before-commit") else 2)
            return f"point:{name}:{nth}"
        low, high = self.timer_range
        clean = sorted(a.seconds for a in self.attempts if a.returncode == 0)
        if clean:  # land inside a run: before the typical run would have finished
            high = max(low + 1.0, min(high, 0.9 * clean[len(clean) // 2]))
        return f"timer:{self.rng.uniform(low, high):.1f}"

    def publish(self, moves: int = 1) -> None:
        """Publish rounds until the global watermark has moved ``moves`` times (so the next
        runs have that many batches to commit, and reach crash points passed later)."""
        for _ in range(moves):
            before = self.sim.reference.global_watermark()
            while self.sim.pending:
                self.sim.publish(1)
                if self.sim.reference.global_watermark() > before:
                    break

    def round(self, modes: list[str], *, tries: int = 3) -> list[Attempt]:
        """Publish, then one run per kill mode, each restarting the killed one; then clean.

        A crash point a run never reached (it had nothing to commit) lets the run finish;
        then more of the log is published and the mode tried again (up to ``tries``).
        """
        self.publish(moves=max(1, len(modes)))
        done = []
        for mode in modes:
            for _ in range(tries):
                done.append(self.run_job(mode))
                if done[-1].killed or not self.sim.pending:
                    break
                self.publish()
        if not done or done[-1].returncode != 0:
            done.append(self.run_job("clean"))
        self.sim.runs += 1
        return done

    def run_until(self, kills: int, *, per_round: int = 1, progress: Any = None) -> None:
        """Rounds of ``per_round`` random kills until ``kills`` kills landed (or the log ends).

        Within a round each run restarts the one killed before it, so with ``per_round`` > 1
        kills also land while a restarted job recovers (replaying a batch, skipping tables
        that committed it), and fewer clean runs are spent per kill.
        """
        while self.kills < kills and self.sim.pending:
            count = min(per_round, kills - self.kills)
            self.round([self.random_mode() for _ in range(count)])
            if progress:
                progress(self)
        if self.sim.pending:  # the rest of the log at once, without kills
            self.sim.publish(len(self.sim.pending))
            self.round([])

    # -- checking -----------------------------------------------------------------------
    def check(self, spark: Any) -> CheckResult:
        """The oracle over every version of every view (see the module docstring)."""
        self.sim.assert_latest_is_global_watermark()
        for name, view in self.sim.config.views.items():
            infos = [v for v in delta.versions(view.path) if v.watermark is not None]
            batches = [v.batch_id for v in infos]
            assert len(set(batches)) == len(batches), f"{name}: a batch committed twice: {batches}"
            assert all(v.job == self.sim.config.name for v in infos), f"{name}: foreign versions"
        checked = self.sim.assert_every_version_matches_truth(spark)
        final = max(self.sim.reference.global_watermark(), self.sim.reference.start_ts)
        return CheckResult(checked, len(self.sim.config.views), final)

    def summary(self) -> dict[str, Any]:
        by_mode: dict[str, int] = {}
        for a in self.attempts:
            if a.killed:
                key = (
                    a.mode.split(":")[0] if a.mode.startswith("timer") else a.mode.rsplit(":", 1)[0]
                )
                by_mode[key] = by_mode.get(key, 0) + 1
        return {
            "kills": self.kills,
            "attempts": len(self.attempts),
            "rounds": self.sim.runs,
            "kills_by_mode": dict(sorted(by_mode.items())),
            "seconds": round(sum(a.seconds for a in self.attempts), 1),
        }


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _wait_group_gone(pgid: int, timeout: float = 30.0) -> None:
    """Wait until no process of the group is left (a JVM must not write after its driver)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
