"""Drive the view job over a simulated upstream, publishing its log unevenly."""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chispa import assert_df_equality

from deltamv import delta
from deltamv.changelog.segments import list_segments
from deltamv.check.oracle import version_pairs
from deltamv.config import JobConfig, load_config
from deltamv.job import ViewJob
from deltamv.sim import Truth, simulate
from deltamv.sim.reference import ReferenceReader, rounds


@dataclass
class SimJob:
    """A simulated run, and a job reading a change-log folder published round by round."""

    run: Path
    job_dir: Path
    config: JobConfig
    truth: Truth
    reference: ReferenceReader
    pending: list[list[tuple[int, Any]]] = field(default_factory=list)
    runs: int = 0

    @classmethod
    def create(
        cls, tmp: Path, workload: str, *, seed: int, max_per_round: int = 4,
        segments_per_batch: int = 1000, views: Mapping[str, str] | None = None, **sim: Any,
    ) -> SimJob:  # fmt: skip
        """``views``: more views (name -> SQL) beside the workload's own."""
        run = tmp / "run"
        result = simulate(workload, run, seed=seed, **sim)
        job_dir = tmp / "job"
        (job_dir / "changelog").mkdir(parents=True)
        text = (run / "config.toml").read_text()
        text = text.replace(
            'changelog = "changelog"',
            f'changelog = "changelog"\nmax_segments_per_batch = {segments_per_batch}',
        )
        text = text.replace('snapshot = "snapshot"', f'snapshot = "{run / "snapshot"}"')
        for name, sql in (views or {}).items():
            text += f'\n[views.{name}]\nsql = {json.dumps(sql)}\npath = "out/views/{name}"\n'
        (job_dir / "config.toml").write_text(text)
        segments = list_segments(str(run / "changelog"))
        job = cls(
            run, job_dir, load_config(job_dir / "config.toml"), result.truth(),
            ReferenceReader.for_run(run),
            list(rounds(segments, random.Random(seed), max_per_round=max_per_round)),
        )  # fmt: skip
        return job

    def publish(self, n_rounds: int) -> None:
        """Copy the next rounds' segments into the job's change log (and the reference)."""
        for _ in range(n_rounds):
            if not self.pending:
                return
            for region, seg in self.pending.pop(0):
                target = self.job_dir / "changelog" / f"region-{region}"
                target.mkdir(exist_ok=True)
                # Written under a hidden name and renamed, as the contract asks of writers.
                tmp = target / f".{Path(seg.path).name}.tmp"
                shutil.copyfile(seg.path, tmp)
                tmp.rename(target / Path(seg.path).name)
                self.reference.feed_segment(region, seg.path)

    def run_once(self, spark: Any) -> dict[str, str]:
        """One run of the job; its views' modes."""
        job = ViewJob(self.config, spark)
        job.run(once=True)
        self.runs += 1
        return job.modes

    def latest_watermarks(self) -> dict[str, int | None]:
        out = {}
        for name, view in self.config.views.items():
            versions = (
                delta.versions(view.path) if delta.table_version(view.path) is not None else []
            )
            out[name] = versions[-1].watermark if versions else None
        return out

    def assert_latest_is_global_watermark(self) -> None:
        """docs/guarantees.md: after --once, each view's latest version has the global watermark."""
        expected = max(self.reference.global_watermark(), self.reference.start_ts)
        start = self.reference.start_ts
        for name, latest in self.latest_watermarks().items():
            if latest is None:  # nothing committed yet: only while nothing is resolved
                assert expected == start, f"{name}: no version, but the log resolves to {expected}"
            else:
                assert latest == expected, (
                    f"{name}: latest watermark {latest}, log resolves to {expected}"
                )

    def assert_every_version_matches_truth(self, spark: Any) -> int:
        """Every version of every view equals the view SQL over the truth at its watermark."""
        checked = 0
        for name in self.config.views:
            if delta.table_version(self.config.views[name].path) is None:
                continue
            watermarks = []
            for pair in version_pairs(spark, self.config, self.truth, name):
                watermarks.append(pair.watermark)
                assert_df_equality(
                    pair.actual.select(*pair.expected.columns), pair.expected,
                    ignore_row_order=True, ignore_nullable=True,
                )  # fmt: skip
                checked += 1
            assert watermarks == sorted(watermarks), f"{name}: watermarks decrease: {watermarks}"
            assert len(set(watermarks)) == len(watermarks), (
                f"{name}: a watermark repeats: {watermarks}"
            )
        return checked
