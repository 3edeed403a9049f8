"""The view job end to end on small hand-written change logs (the simulator tests are
in test_job_oracle.py)."""

from __future__ import annotations

import logging
import math
import os
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality
from pyspark.errors import PySparkException
from pyspark.sql.functions import udf

from deltamv import delta
from deltamv.changelog.segments import Segment
from deltamv.config import load_config
from deltamv.errors import BadRecordError, ConfigError, StateError
from deltamv.job import ViewJob
from deltamv.job.changelog import ChangelogUpstream
from tests.helpers import changelog as log
from tests.helpers.bank import (
    CONFIG,
    GOOD_1_2,
    GOOD_2_2,
    TOTAL_BALANCE_SQL,
    commit,
    lines,
    put,
    resolved,
    segment,
    write_start,
)


@pytest.fixture
def bank(tmp_path: Path) -> Path:
    return write_start(tmp_path)


def rows(spark: Any, path: Path, version: int | None = None) -> Any:
    return delta.read_spark(spark, str(path), version)


def test_once_commits_one_consistent_version_per_view(spark: Any, bank: Path) -> None:
    config = load_config(bank / "config.toml")
    reports = ViewJob(config, spark).run(once=True)
    assert [r.watermark for r in reports if r.committed] == [115]
    # the checkpoint file manager the job set for its query is not left on the session
    assert spark.conf.get("spark.sql.streaming.checkpointFileManagerClass", None) is None
    total = bank / "out" / "views" / "total_balance"
    assert [v.watermark for v in delta.versions(str(total))] == [115]
    expected = spark.createDataFrame([(300, 3)], "total BIGINT, accounts BIGINT NOT NULL")
    assert_df_equality(rows(spark, total), expected, ignore_nullable=True)

    # A transfer of 50 from account 1 to 7, split over both regions; then run again.
    segment(bank, 1, 2, GOOD_1_2)
    segment(bank, 2, 2, GOOD_2_2)
    ViewJob(config, spark).run(once=True)
    versions = delta.versions(str(total))
    assert [v.watermark for v in versions] == [115, 140]
    assert all(v.job == "bank" for v in versions)
    assert_df_equality(rows(spark, total, 1), expected, ignore_nullable=True)
    rich = spark.createDataFrame([(2, "o2"), (7, "o7")], "id BIGINT, owner STRING")
    assert_df_equality(
        rows(spark, bank / "out" / "views" / "rich"),
        rich,
        ignore_row_order=True,
        ignore_nullable=True,
    )


def run_saying(spark: Any, config_path: Path, caplog: pytest.LogCaptureFixture) -> list[str]:
    """One ``run --once`` of the config; what it logged (the "deltamv" logger does not
    propagate to caplog's root handler)."""
    caplog.clear()
    caplog.set_level(logging.INFO, logger="deltamv")
    ours = logging.getLogger("deltamv")
    ours.addHandler(caplog.handler)
    try:
        ViewJob(load_config(config_path), spark).run(once=True)
    finally:
        ours.removeHandler(caplog.handler)
    return [r.getMessage() for r in caplog.records if r.name.startswith("deltamv")]


def _two_runs_around_a_transfer(spark: Any, bank: Path) -> Any:
    """A run over the first segments, the transfer of 50 from 1 to 7, a run over it."""
    config = load_config(bank / "config.toml")
    ViewJob(config, spark).run(once=True)
    segment(bank, 1, 2, GOOD_1_2)
    segment(bank, 2, 2, GOOD_2_2)
    ViewJob(config, spark).run(once=True)
    return config


def test_a_job_without_a_snapshot_creates_its_views_from_the_first_change(
    spark: Any, bank: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tables start empty: the first versions are the views over empty tables plus
    the batch's change, with no full evaluation of the mirrors; a view whose rows the
    change does not reach still gets its one row over empty input, and a view with no
    row at all an empty table."""
    from deltamv.job.views import MirrorFiles, ViewSet

    config_text = CONFIG + (
        '\n[views.big]\nsql = "SELECT COUNT(*) AS n, SUM(balance) AS s FROM accounts'
        ' WHERE balance > 1000"\npath = "out/views/big"\n'
        '\n[views.crowded]\nsql = "SELECT owner, COUNT(*) AS n FROM accounts GROUP BY owner'
        ' HAVING COUNT(*) >= 2"\npath = "out/views/crowded"\n'
    )
    (bank / "config.toml").write_text(config_text)
    config = load_config(bank / "config.toml")
    scanned: list[str] = []  # mirrors written out for a full evaluation while they held rows
    real_path = MirrorFiles.path

    def path(self: MirrorFiles, table: str) -> str:
        if not self.empty and not self.mirrors[table].is_empty():
            scanned.append(table)
        return real_path(self, table)

    def contents(self: ViewSet, name: str, scratch: Path) -> Any:
        raise AssertionError(f"view {name} evaluated in full")

    monkeypatch.setattr(MirrorFiles, "path", path)
    monkeypatch.setattr(ViewSet, "contents", contents)
    reports = ViewJob(config, spark).run(once=True)
    assert [r.watermark for r in reports if r.committed] == [115]
    assert scanned == []
    views = bank / "out" / "views"
    for name in ("total_balance", "rich", "big", "crowded"):
        assert [(v.version, v.watermark) for v in delta.versions(str(views / name))] == [(0, 115)]
    assert rows(spark, views / "crowded").count() == 0
    assert_df_equality(
        rows(spark, views / "total_balance"),
        spark.createDataFrame([(300, 3)], "total BIGINT, accounts BIGINT NOT NULL"),
        ignore_nullable=True,
    )
    assert_df_equality(
        rows(spark, views / "rich"),
        spark.createDataFrame([(1, "o1"), (2, "o2"), (7, "o7")], "id BIGINT, owner STRING"),
        ignore_row_order=True,
        ignore_nullable=True,
    )
    assert_df_equality(
        rows(spark, views / "big"),
        spark.createDataFrame([(0, None)], "n BIGINT NOT NULL, s BIGINT"),
        ignore_nullable=True,
    )

    # The next batch is incremental against those versions.
    monkeypatch.undo()
    segment(bank, 1, 2, GOOD_1_2)
    segment(bank, 2, 2, GOOD_2_2)
    ViewJob(config, spark).run(once=True)
    assert_df_equality(
        rows(spark, views / "rich"),
        spark.createDataFrame([(2, "o2"), (7, "o7")], "id BIGINT, owner STRING"),
        ignore_row_order=True,
        ignore_nullable=True,
    )
    assert [v.watermark for v in delta.versions(str(views / "big"))] == [115, 140]
    assert [v.watermark for v in delta.versions(str(views / "crowded"))] == [115, 140]


def _spy_parses(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[str, ...]]]:
    """Every group of segments the job parses: (thread name, the segments' paths)."""
    parsed: list[tuple[str, tuple[str, ...]]] = []
    real = ChangelogUpstream._parse

    def spy(self: ChangelogUpstream, group: Sequence[Segment]) -> Any:
        parsed.append((threading.current_thread().name, tuple(s.path for s in group)))
        return real(self, group)

    monkeypatch.setattr(ChangelogUpstream, "_parse", spy)
    return parsed


def test_the_first_batch_takes_the_segments_parsed_ahead(
    spark: Any, bank: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While Spark starts the query, the job parses what the first batch will read; the
    batch takes that parse, and no segment is parsed twice (a first start, then a
    restart over new segments)."""
    parsed = _spy_parses(monkeypatch)
    _two_runs_around_a_transfer(spark, bank)
    total = bank / "out" / "views" / "total_balance"
    assert [v.watermark for v in delta.versions(str(total))] == [115, 140]
    files = sorted(str(p) for p in (bank / "changelog").rglob("*") if p.is_file())
    assert len(files) == 4
    assert sorted(path for _, group in parsed for path in group) == files  # each once
    assert [thread for thread, _ in parsed] == ["deltamv-parse-ahead"] * 2


def test_a_batch_that_reads_other_segments_than_parsed_ahead_parses_its_own(
    spark: Any, bank: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A guess that is not what the batch reads next in its region (here: region 1's
    second segment, where the batch reads its first before) is dropped; the batch parses
    every segment itself."""
    segment(bank, 1, 2, GOOD_1_2)
    segment(bank, 2, 2, GOOD_2_2)
    parsed = _spy_parses(monkeypatch)
    real = ChangelogUpstream._first_batch_ahead

    def wrong(self: ChangelogUpstream, done: int, *, once: bool) -> tuple[Segment, ...]:
        return tuple(s for s in real(self, done, once=once) if s.region == 1)[1:]

    monkeypatch.setattr(ChangelogUpstream, "_first_batch_ahead", wrong)
    reports = ViewJob(load_config(bank / "config.toml"), spark).run(once=True)
    assert [r.watermark for r in reports if r.committed] == [140]
    ahead = [group for thread, group in parsed if thread == "deltamv-parse-ahead"]
    own = [path for thread, group in parsed if thread != "deltamv-parse-ahead" for path in group]
    assert ahead == [(str(bank / "changelog" / "region-1" / "000002.jsonl"),)]
    assert sorted(own) == sorted(str(p) for p in (bank / "changelog").rglob("*") if p.is_file())


def test_a_guess_of_one_regions_segments_is_taken_and_the_others_parsed(
    spark: Any, bank: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regions have no order between them: a guess holding region 2's segments alone is
    what the batch reads next there, so it is taken; region 1's are parsed by the batch."""
    parsed = _spy_parses(monkeypatch)
    real = ChangelogUpstream._first_batch_ahead

    def region_2(self: ChangelogUpstream, done: int, *, once: bool) -> tuple[Segment, ...]:
        return tuple(s for s in real(self, done, once=once) if s.region == 2)

    monkeypatch.setattr(ChangelogUpstream, "_first_batch_ahead", region_2)
    reports = ViewJob(load_config(bank / "config.toml"), spark).run(once=True)
    assert [r.watermark for r in reports if r.committed] == [115]
    files = sorted(str(p) for p in (bank / "changelog").rglob("*") if p.is_file())
    assert sorted(path for _, group in parsed for path in group) == files  # each once
    ahead = [path for thread, group in parsed if thread == "deltamv-parse-ahead" for path in group]
    assert ahead and all("region-2" in path for path in ahead)
    total = bank / "out" / "views" / "total_balance"
    expected = spark.createDataFrame([(300, 3)], "total BIGINT, accounts BIGINT NOT NULL")
    assert_df_equality(rows(spark, total), expected, ignore_nullable=True)


def test_a_batch_of_many_groups_takes_those_parsed_ahead_then_parses_the_rest_in_order(
    spark: Any, bank: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One segment a group: the guess (the batch's first segment only) is taken, the
    other groups are parsed on a thread beside the batch, each once, in the batch's
    order; a second run (every group parsed ahead) gives the next consistent version."""
    from deltamv.job import changelog

    monkeypatch.setattr(changelog, "_GROUP_BYTES", 1)
    monkeypatch.setattr(changelog, "_AHEAD_BYTES", 1)
    segment(bank, 1, 2, GOOD_1_2)  # (four segments in the first batch)
    segment(bank, 2, 2, GOOD_2_2)
    parsed = _spy_parses(monkeypatch)
    real = ChangelogUpstream._first_batch_ahead

    def first_only(self: ChangelogUpstream, done: int, *, once: bool) -> tuple[Segment, ...]:
        return real(self, done, once=once)[:1]

    monkeypatch.setattr(ChangelogUpstream, "_first_batch_ahead", first_only)
    reports = ViewJob(load_config(bank / "config.toml"), spark).run(once=True)
    assert [r.watermark for r in reports if r.committed] == [140]
    files = [str(bank / "changelog" / f"region-{r}" / name)
             for r in (1, 2) for name in sorted(os.listdir(bank / "changelog" / f"region-{r}"))]  # fmt: skip
    assert [group for _, group in parsed] == [(f,) for f in files]  # each once, in order
    assert [thread for thread, _ in parsed] == ["deltamv-parse-ahead"] + ["deltamv-parse"] * 3
    total = bank / "out" / "views" / "total_balance"
    expected = spark.createDataFrame([(300, 3)], "total BIGINT, accounts BIGINT NOT NULL")
    assert_df_equality(rows(spark, total), expected, ignore_nullable=True)


def test_a_continuous_run_parses_the_segments_that_appear_while_it_waits(
    spark: Any, bank: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between two triggers of a continuous run, the segments that appear after the last
    batch's are parsed as they appear; the next batch takes them (each segment parsed
    once, none by the batch itself) and commits the next consistent version."""
    parsed = _spy_parses(monkeypatch)
    new = [bank / "changelog" / f"region-{r}" / "000002.jsonl" for r in (1, 2)]
    real_after = ChangelogUpstream.after_batch

    def after_batch(self: ChangelogUpstream, store: Any, batch: int) -> None:
        real_after(self, store, batch)
        if batch == 0:  # the transfer appears while the run waits for its next trigger
            segment(bank, 1, 2, GOOD_1_2)
            segment(bank, 2, 2, GOOD_2_2)
            deadline = time.monotonic() + 60
            while not {str(p) for p in new} <= {str(p) for _, group in parsed for p in group}:
                assert time.monotonic() < deadline, parsed
                time.sleep(0.02)

    monkeypatch.setattr(ChangelogUpstream, "after_batch", after_batch)
    config = load_config(bank / "config.toml")
    job = ViewJob(config, spark)
    failed: list[BaseException] = []

    def run() -> None:
        try:
            job.run(once=False)
        except BaseException as e:  # (reported by the assertion below)
            failed.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    total = bank / "out" / "views" / "total_balance"
    deadline = time.monotonic() + 120
    try:
        while not failed and time.monotonic() < deadline:
            if delta.table_version(str(total)) is not None and 140 in [
                v.watermark for v in delta.versions(str(total))
            ]:
                break
            time.sleep(0.1)
    finally:
        job.request_stop()
        thread.join(60)
    assert not failed and not thread.is_alive()
    assert [v.watermark for v in delta.versions(str(total))] == [115, 140]
    expected = spark.createDataFrame([(300, 3)], "total BIGINT, accounts BIGINT NOT NULL")
    assert_df_equality(rows(spark, total), expected, ignore_nullable=True)
    files = sorted(str(p) for p in (bank / "changelog").rglob("*") if p.is_file())
    assert sorted(path for _, group in parsed for path in group) == files  # each once
    assert {thread for thread, _ in parsed} == {"deltamv-parse-ahead"}, parsed
    assert not [t for t in threading.enumerate() if t.name.startswith("deltamv-parse")]


def test_a_bad_record_in_a_later_group_stops_the_batch_at_its_line(
    spark: Any, bank: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A parse on the thread that fails is raised where the batch takes that group: the
    one-line error names the file and line, and nothing of the batch is committed."""
    from deltamv.job import changelog

    monkeypatch.setattr(changelog, "_GROUP_BYTES", 1)
    monkeypatch.setattr(changelog, "_AHEAD_BYTES", 1)
    segment(bank, 1, 2, GOOD_1_2)
    bad = segment(bank, 2, 2, GOOD_2_2 + '{"region": 2, "type": "RESOLVED"}\n')
    with pytest.raises(BadRecordError) as raised:
        ViewJob(load_config(bank / "config.toml"), spark).run(once=True)
    assert str(raised.value).startswith(f"bad record at {bad}:4: ")
    assert not (bank / "out" / "views" / "total_balance").exists()
    assert not [t for t in threading.enumerate() if t.name.startswith("deltamv-parse")]


def test_a_double_changed_only_from_zero_to_minus_zero_is_changed(
    spark: Any, tmp_path: Path
) -> None:
    """-0.0 equals 0.0 in SQL, but it is another value (``CAST`` and ``1/x`` tell them
    apart): an update from one to the other reaches the table's copy and every view."""
    (tmp_path / "config.toml").write_text(
        '[job]\nname = "z"\nchangelog = "changelog"\ncheckpoint = "state"\nmax_segments_per_batch = 1\n'
        '[tables.t]\nschema = "id BIGINT NOT NULL, x DOUBLE"\nprimary_key = ["id"]\n'
        'path = "out/t"\n'
        '[views.same]\nsql = "SELECT id, x FROM t"\npath = "out/same"\n'
        '[views.text]\nsql = "SELECT id, CAST(x AS STRING) AS s FROM t"\npath = "out/text"\n'
    )
    changelog = tmp_path / "changelog"
    events = [log.initialized(1, "", ""), *_put_x(100, 0.0, None), log.resolved(1, 200)]
    log.write_segment(changelog, 1, 1, events)
    log.write_segment(changelog, 1, 2, [*_put_x(300, -0.0, 0.0), log.resolved(1, 400)])
    log.write_segment(changelog, 1, 3, [*_put_x(500, 0.0, -0.0), log.resolved(1, 600)])
    config = load_config(tmp_path / "config.toml")
    ViewJob(config, spark).run(once=True)
    signs = {-1.0: "-0.0", 1.0: "0.0"}
    for name in ("t", "same", "text"):
        path = str(tmp_path / "out" / name)
        got = []
        for info in delta.versions(path):
            row = delta.read_arrow(path, info.version).to_pylist()
            assert len(row) == 1, (name, row)
            value = row[0]["s"] if name == "text" else signs[math.copysign(1.0, row[0]["x"])]
            got.append((info.watermark, value))
        assert got == [(200, "0.0"), (400, "-0.0"), (600, "0.0")], name


def test_an_aggregates_result_changed_only_from_zero_to_minus_zero_is_changed(
    spark: Any, tmp_path: Path
) -> None:
    """A kept aggregate's result row that changes only from 0.0 to -0.0 (here the MIN,
    0.0, times a sign that turns as the row count crosses 1) is a new result, not the
    old one cancelled by its equal."""
    (tmp_path / "config.toml").write_text(
        '[job]\nname = "z"\nchangelog = "changelog"\ncheckpoint = "state"\nmax_segments_per_batch = 1\n'
        '[tables.t]\nschema = "id BIGINT NOT NULL, x DOUBLE"\nprimary_key = ["id"]\n'
        '[views.flip]\nsql = "SELECT MIN(x) * (CASE WHEN COUNT(*) > 1 THEN -1.0D ELSE 1.0D END)'
        ' AS x FROM t"\npath = "out/flip"\n'
    )
    changelog = tmp_path / "changelog"

    def row(ts: int, key: int, delete: bool = False) -> list[Any]:
        change = log.put(1, ts, f"t/{key}", {"id": key, "x": float(key - 1)}, table="t")
        if delete:
            change = {k: v for k, v in change.items() if k != "value"} | {"op": "DELETE"}
        return [change, log.commit(1, ts, ts + 1, f"t/{key}", table="t")]

    log.write_segment(
        changelog, 1, 1, [log.initialized(1, "", ""), *row(100, 1), log.resolved(1, 200)]
    )
    log.write_segment(changelog, 1, 2, [*row(300, 2), log.resolved(1, 400)])
    log.write_segment(changelog, 1, 3, [*row(500, 2, delete=True), log.resolved(1, 600)])
    config = load_config(tmp_path / "config.toml")
    job = ViewJob(config, spark)
    job.run(once=True)
    assert job.modes["flip"] == "incremental", job.modes
    path = str(tmp_path / "out" / "flip")
    got = []
    for info in delta.versions(path):
        (only,) = delta.read_arrow(path, info.version).to_pylist()
        got.append((info.watermark, math.copysign(1.0, only["x"])))
    assert got == [(200, 1.0), (400, -1.0), (600, 1.0)]


def test_a_view_whose_tables_spark_prunes_away_is_evaluated(spark: Any, tmp_path: Path) -> None:
    """Spark's optimizer leaves no table in the plan of ``WHERE 1 = 0``: the view still
    reads (and is evaluated over) the tables its SQL names, at every version."""
    (tmp_path / "config.toml").write_text(
        '[job]\nname = "p"\nchangelog = "changelog"\ncheckpoint = "state"\nmax_segments_per_batch = 1\n'
        '[tables.t]\nschema = "id BIGINT NOT NULL, x DOUBLE"\nprimary_key = ["id"]\n'
        '[views.none]\nsql = "SELECT COUNT(*) AS n FROM t WHERE 1 = 0"\npath = "out/none"\n'
        '[views.empty]\nsql = "SELECT x FROM t WHERE false"\npath = "out/empty"\n'
        '[views.sub]\nsql = "SELECT id FROM t WHERE id IN (SELECT id FROM t WHERE 1 = 0)"\n'
        'path = "out/sub"\n'
    )
    changelog = tmp_path / "changelog"
    log.write_segment(
        changelog, 1, 1, [log.initialized(1, "", ""), *_put_x(100, 1.0, None), log.resolved(1, 200)]
    )
    log.write_segment(changelog, 1, 2, [*_put_x(300, 2.0, 1.0), log.resolved(1, 400)])
    config = load_config(tmp_path / "config.toml")
    job = ViewJob(config, spark)
    job.run(once=True)
    for name, want in (("none", [{"n": 0}]), ("empty", []), ("sub", [])):
        path = str(tmp_path / "out" / name)
        got = [
            (v.watermark, delta.read_arrow(path, v.version).to_pylist())
            for v in delta.versions(path)
        ]
        assert got == [(200, want), (400, want)], (name, job.modes[name])


def _put_x(start_ts: int, x: float, old: float | None) -> list[Any]:
    old_value = {} if old is None else {"old_value": {"id": 1, "x": old}}
    return [
        log.put(1, start_ts, "t/1", {"id": 1, "x": x}, table="t", **old_value),
        log.commit(1, start_ts, start_ts + 1, "t/1", table="t"),
    ]


def test_a_stop_while_the_job_opens_runs_no_batch(
    spark: Any, bank: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The query starts while the job opens; a stop asked for meanwhile, with the first
    batch already waiting, ends the run before any batch, and the next run processes the
    log as if nothing happened (the stop may cut Spark's first offset write short)."""
    config = load_config(bank / "config.toml")
    job = ViewJob(config, spark)
    real_open = ViewJob._open

    def open_then_stop(self: ViewJob, *args: Any) -> Any:
        runner = real_open(self, *args)
        query = self._query
        assert query is not None  # started before the job opened
        deadline = time.monotonic() + 60
        while not query.status["isTriggerActive"] and time.monotonic() < deadline:
            time.sleep(0.05)  # until the first batch waits for the job
        assert query.status["isTriggerActive"]
        self.request_stop()  # as the SIGTERM handler does
        return runner

    monkeypatch.setattr(ViewJob, "_open", open_then_stop)
    assert job.run(once=True) == []
    assert spark.streams.active == []
    total = bank / "out" / "views" / "total_balance"
    assert delta.table_version(str(total)) is None  # no batch ran
    monkeypatch.undo()
    reports = ViewJob(config, spark).run(once=True)
    assert [r.watermark for r in reports if r.committed] == [115]
    assert [v.watermark for v in delta.versions(str(total))] == [115]


def test_a_log_write_cut_short_does_not_keep_the_job_from_starting(spark: Any, bank: Path) -> None:
    """A stop or kill while Spark writes its first offset entry leaves the hidden
    temporary file; Spark would refuse to start at batch 0 over it."""
    offsets = bank / "state" / "_checkpoint" / "spark" / "offsets"
    offsets.mkdir(parents=True)
    (offsets / ".0.6f1c2b7e-0c1d-4c55-9f0e-3a1d2b4c5e6f.tmp").write_text('v1\n{"batchWat')
    (offsets / "..0.6f1c2b7e-0c1d-4c55-9f0e-3a1d2b4c5e6f.tmp.crc").write_bytes(b"crc")
    # and scratch a run killed in a full evaluation leaves (a mirror's Parquet copy)
    stale = bank / "state" / "_checkpoint" / "tmp" / "mirrors-1" / "accounts.parquet"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"PAR1")
    reports = ViewJob(load_config(bank / "config.toml"), spark).run(once=True)
    assert [r.watermark for r in reports if r.committed] == [115]
    assert sorted(p.name for p in offsets.iterdir() if not p.name.endswith(".crc")) == ["0"]
    assert not stale.parent.exists()


def test_a_spark_checkpoint_that_lost_its_last_batch_is_refused(spark: Any, bank: Path) -> None:
    """Spark's last offset and commit entries lost: Spark plans that batch again over
    more segments. The job took it for the batch it had finished and skipped all of
    them (views stalled at the batch before, with exit 0)."""
    config = _two_runs_around_a_transfer(spark, bank)
    spark_dir = bank / "state" / "_checkpoint" / "spark"
    for log_dir in ("offsets", "commits"):
        for entry in (spark_dir / log_dir).glob("*1*"):
            entry.unlink()
    segment(bank, 1, 3, lines([resolved(1, 170)]))
    segment(bank, 2, 3, lines([resolved(2, 170)]))
    total = str(bank / "out" / "views" / "total_balance")
    with pytest.raises(StateError, match=r"Spark's offset log says batch 1 ends at .* but the job"):
        ViewJob(config, spark).run(once=True)
    assert [v.watermark for v in delta.versions(total)] == [115, 140]


def test_a_python_error_behind_a_failed_query_is_named_by_its_own_line(
    spark: Any, bank: Path
) -> None:
    """An exception that is not deltamv's, raised in Python under Spark (a worker, the
    source's planning), reaches the job as Spark's message holding the Python traceback
    whole: the job's one line names the exception by the traceback's last line (it kept
    the first line of Spark's message alone, which can end in "Traceback (most recent
    call last):")."""
    fails = udf(lambda i: {}["no such key"], "int")
    with pytest.raises(PySparkException) as info:
        spark.range(1).select(fails("id")).collect()
    assert "Traceback (most recent call last):" in str(info.value)
    explained = ViewJob(load_config(bank / "config.toml"), spark)._explain(info.value)
    message = str(explained)
    assert message.startswith("the streaming query failed: ")
    assert message.endswith(" KeyError: 'no such key'"), message
    assert "Traceback" not in message and "\n" not in message


def test_bad_record_stops_the_batch_and_commits_nothing(spark: Any, bank: Path) -> None:
    config = load_config(bank / "config.toml")
    bad = segment(bank, 2, 2, lines([resolved(2, 140), resolved(2, 139)]))
    with pytest.raises(BadRecordError) as info:
        ViewJob(config, spark).run(once=True)
    assert (info.value.file, info.value.line) == (str(bad), 2)
    assert "going backwards" in str(info.value)
    assert "\n" not in str(info.value)
    assert delta.table_version(str(bank / "out" / "views" / "total_balance")) is None

    # Repaired (the upstream fixed the segment): the job resumes from where it stood.
    bad.write_text(lines([resolved(2, 140)]))
    ViewJob(config, spark).run(once=True)
    assert [v.watermark for v in delta.versions(str(bank / "out" / "views" / "total_balance"))] == [
        120
    ]


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("SELECT SUM(balance) FROM acounts", "acounts"),
        ("SELECT SUM(balanse) AS total FROM accounts", "balanse"),
        ("SELEC 1", "views.total_balance.sql"),
    ],
)
def test_view_sql_errors_name_the_key_before_reading(
    spark: Any, bank: Path, sql: str, message: str
) -> None:
    text = CONFIG.replace(TOTAL_BALANCE_SQL, sql)
    (bank / "config.toml").write_text(text)
    config = load_config(bank / "config.toml")
    leaves = set(Path(tempfile.gettempdir()).glob("deltamv-plan-*"))
    with pytest.raises(ConfigError) as info:
        ViewJob(config, spark).run(once=True)
    assert info.value.key == "views.total_balance.sql"
    assert message in str(info.value)
    assert not (bank / "state" / "_checkpoint").exists()
    # The tables' temporary views and empty folders of the analysis are gone too.
    assert not {t.name for t in spark.catalog.listTables() if t.isTemporary} & set(config.tables)
    assert set(Path(tempfile.gettempdir()).glob("deltamv-plan-*")) == leaves


def test_outputs_taken_out_of_the_config_and_put_back_are_rebuilt(
    spark: Any, bank: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A recomputed view (which reads a Delta copy of its table) and a table copy are
    taken out of the config while changes are applied, and put back: their next version
    is rebuilt, not the next change applied to their old copy (test_bad_input.py takes
    one out between its batch's staging and its publishing)."""
    from tests.helpers.bank import commit, put

    config_path = bank / "config.toml"
    base = config_path.read_text()
    copy = '[tables.accounts]\npath = "out/tables/accounts"\n'
    extra = (
        '\n[views.balances]\nsql = "SELECT id, balance FROM accounts"'
        '\npath = "out/views/balances"\nmaintain = "recompute"\n'
    )
    with_all = base.replace("[tables.accounts]\n", copy) + extra
    config_path.write_text(with_all)
    ViewJob(load_config(config_path), spark).run(once=True)  # watermark 115
    config_path.write_text(base)
    segment(bank, 1, 2, GOOD_1_2)  # 50 from account 1 to account 7
    segment(bank, 2, 2, GOOD_2_2)
    said = run_saying(spark, config_path, caplog)  # 140, without the two
    assert (
        "view balances: no longer in the config: its table keeps its last version, no longer"
        " updated"
    ) in said, said
    config_path.write_text(with_all)
    segment(bank, 1, 3, lines([put(1, 160, 2, 70), commit(1, 160, 161, 2), resolved(1, 170)]))
    segment(bank, 2, 3, lines([resolved(2, 170)]))
    ViewJob(load_config(config_path), spark).run(once=True)  # 170, with them again

    schema = "id BIGINT, balance BIGINT"
    truth = spark.createDataFrame([(1, 50), (2, 70), (7, 150)], schema)
    balances = bank / "out" / "views" / "balances"
    # put back at the start (watermark 140, where the job stood), then batch 170
    assert [v.watermark for v in delta.versions(str(balances))] == [115, 140, 170]
    assert_df_equality(rows(spark, balances), truth, ignore_row_order=True, ignore_nullable=True)
    accounts = rows(spark, bank / "out" / "tables" / "accounts").select("id", "balance")
    assert_df_equality(accounts, truth, ignore_row_order=True, ignore_nullable=True)


def test_a_run_with_nothing_new_publishes_views_added_or_changed_at_its_watermark(
    spark: Any, bank: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """After ``run --once`` every view has a version at the global watermark (CONTRACT
    section 6), also one added to the config, or whose SQL changed, when the change log
    holds nothing new (no batch runs): the start publishes them (an outside check found
    a new view without a table, and a changed one holding its old SQL's rows)."""
    config_path = bank / "config.toml"
    ViewJob(load_config(config_path), spark).run(once=True)  # watermark 115
    rich = "SELECT id, owner FROM accounts WHERE balance >= 100"
    config_path.write_text(
        CONFIG.replace(rich, "SELECT id, owner FROM accounts WHERE balance > 100")
        + '\n[views.poor]\nsql = "SELECT id FROM accounts WHERE balance <= 100"'
        '\npath = "out/views/poor"\n'
    )
    said = run_saying(spark, config_path, caplog)
    assert (
        "start: published view:poor, view:rich at the watermark the job stands at, 115 (new or"
        " changed since the last run)"
    ) in said, said
    views = bank / "out" / "views"
    marks = {v: [i.watermark for i in delta.versions(str(views / v))]
             for v in ("total_balance", "rich", "poor")}  # fmt: skip
    assert marks == {"total_balance": [115], "rich": [115, 115], "poor": [115]}
    assert rows(spark, views / "rich").count() == 0
    assert sorted(r.id for r in rows(spark, views / "poor").collect()) == [1, 2, 7]
    ViewJob(load_config(config_path), spark).run(once=True)  # nothing new: no version
    assert len(delta.versions(str(views / "poor"))) == 1
    segment(bank, 1, 2, GOOD_1_2)  # 50 from account 1 to account 7
    segment(bank, 2, 2, GOOD_2_2)
    ViewJob(load_config(config_path), spark).run(once=True)
    assert [v.watermark for v in delta.versions(str(views / "poor"))] == [115, 140]
    assert sorted(r.id for r in rows(spark, views / "rich").collect()) == [7]
    assert sorted(r.id for r in rows(spark, views / "poor").collect()) == [1, 2]


def test_a_start_killed_between_publishing_two_new_outputs_publishes_each_once(
    spark: Any, bank: Path
) -> None:
    """Killed right after the start's first commit of a changed view, before its state
    knew: the next start takes that commit as made and publishes the new view once."""
    import os
    import subprocess
    import sys

    config_path = bank / "config.toml"
    ViewJob(load_config(config_path), spark).run(once=True)  # watermark 115
    config_path.write_text(
        CONFIG.replace("balance >= 100", "balance > 100")
        + '\n[views.poor]\nsql = "SELECT id FROM accounts WHERE balance <= 100"'
        '\npath = "out/views/poor"\n'
    )
    killed = subprocess.run(
        [sys.executable, "-m", "deltamv.cli", "run", str(config_path), "--once"],
        env={**os.environ, "DELTAMV_CRASH_AT": "after-commit:1"}, capture_output=True,
        text=True, timeout=600,
    )  # fmt: skip
    assert killed.returncode == -9, killed.stderr[-2000:]
    views = bank / "out" / "views"
    assert len(delta.versions(str(views / "rich"))) == 2  # rich first (the config's order)
    assert delta.table_version(str(views / "poor")) is None
    ViewJob(load_config(config_path), spark).run(once=True)
    marks = {v: [i.watermark for i in delta.versions(str(views / v))] for v in ("rich", "poor")}
    assert marks == {"rich": [115, 115], "poor": [115]}
    assert rows(spark, views / "rich").count() == 0
    assert sorted(r.id for r in rows(spark, views / "poor").collect()) == [1, 2, 7]


def test_a_view_planned_anew_rebuilds_its_state_with_the_new_column_types(
    spark: Any, bank: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A view's SQL changed so that its state groups by a column of another type (Spark
    can also reorder the groups of several DISTINCT aggregates between sessions): the
    state was emptied but kept its old columns, and the next lookup failed ("Could not
    convert '100' with type str") at every start."""
    config_path = bank / "config.toml"
    by_owner = "SELECT owner AS g, COUNT(*) AS n FROM accounts GROUP BY owner"
    by_balance = "SELECT CAST(balance AS STRING) AS g, COUNT(*) AS n FROM accounts GROUP BY balance"
    config_path.write_text(
        CONFIG + f'\n[views.groups]\nsql = "{by_owner}"\npath = "out/views/groups"\n'
    )
    ViewJob(load_config(config_path), spark).run(once=True)
    config_path.write_text(config_path.read_text().replace(by_owner, by_balance))
    segment(bank, 1, 2, GOOD_1_2)
    segment(bank, 2, 2, GOOD_2_2)
    said = run_saying(spark, config_path, caplog)
    assert (
        "view groups: its plan changed since the last run (its SQL, or the rules of this"
        " deltamv): its state is built again, and its table rewritten in full"
    ) in said, said
    assert not any(m.startswith("view total_balance: its plan") for m in said), said
    segment(bank, 1, 3, lines([put(1, 160, 2, 150), commit(1, 160, 161, 2), resolved(1, 170)]))
    segment(bank, 2, 3, lines([resolved(2, 170)]))
    ViewJob(load_config(config_path), spark).run(once=True)

    got = rows(spark, bank / "out" / "views" / "groups")
    expected = spark.createDataFrame([("50", 1), ("150", 2)], "g STRING, n BIGINT")
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)


def test_a_view_whose_sql_now_gives_other_columns_is_refused_before_reading(
    spark: Any, bank: Path
) -> None:
    """A table keeps its columns: a view whose SQL changed its columns stops the job at
    start, naming the view's path key, before any view commits the next batch."""
    config_path = bank / "config.toml"
    ViewJob(load_config(config_path), spark).run(once=True)
    segment(bank, 1, 2, GOOD_1_2)
    segment(bank, 2, 2, GOOD_2_2)
    config_path.write_text(config_path.read_text().replace(
        "SELECT id, owner FROM accounts WHERE balance >= 100",
        "SELECT id, balance FROM accounts WHERE balance >= 100"))  # fmt: skip
    with pytest.raises(ConfigError) as err:
        ViewJob(load_config(config_path), spark).run(once=True)
    assert err.value.key == "views.rich.path", err.value.key
    assert "has columns (id long, owner string) but this job writes (id long, balance long)" in str(
        err.value
    ) and "give it a new path" in str(err.value)
    total = bank / "out" / "views" / "total_balance"
    assert [v.watermark for v in delta.versions(str(total))] == [115]


def test_columns_named_like_the_fields_of_a_change(spark: Any, tmp_path: Path) -> None:
    """A table may have columns named like the fields the job keeps beside them (``key``,
    ``op``, ``commit_ts``, ``__old_<pk>`` ...), its primary key among them: updates, a
    primary-key change, a DELETE by old primary key and one by the PUT before it in the
    batch all land (they stopped the job with a traceback: two columns of one name)."""
    from tests.helpers import changelog as log

    fields = ["key", "op", "type", "region", "row", "start_ts", "commit_ts", "fcommit",
              "_n", "__n", "#key", "__old_key"]  # fmt: skip
    ddl = ", ".join(f"`{f}` {'STRING' if f == 'key' else 'BIGINT'}" for f in fields)
    (tmp_path / "config.toml").write_text(
        '[job]\nname = "kv"\nchangelog = "changelog"\ncheckpoint = "ck"\n\n'
        f'[tables.kv]\nschema = "{ddl}"\nprimary_key = ["key"]\npath = "out/kv"\n\n'
        '[views.by_op]\nsql = "SELECT op, COUNT(*) AS n, SUM(region) AS r FROM kv GROUP BY op"\n'
        'path = "out/by_op"\n'
    )

    def value(k: str, n: int) -> dict[str, Any]:
        return {"key": k, **{f: n * 10 + i for i, f in enumerate(fields) if f != "key"}}

    def put(ts: int, k: str, n: int) -> log.Event:
        return log.put(1, ts, f"kv/{k}", value(k, n), table="kv")

    def delete(ts: int, k: str, *, old: bool) -> log.Event:
        event = {"region": 1, "type": "PREWRITE", "start_ts": ts, "table": "kv",
                 "key": f"kv/{k}", "op": "DELETE"}  # fmt: skip
        return {**event, "old_value": {"key": k}} if old else event

    def commit(ts: int, k: str) -> log.Event:
        return log.commit(1, ts, ts + 1, f"kv/{k}", table="kv")

    changelog = tmp_path / "changelog"
    log.write_segment(changelog, 1, 1, [
        log.initialized(1, "", ""), put(10, "a", 1), put(10, "b", 2), put(10, "c", 3),
        commit(10, "a"), log.resolved(1, 12),
    ])  # fmt: skip
    config = load_config(tmp_path / "config.toml")
    ViewJob(config, spark).run(once=True)
    log.write_segment(changelog, 1, 2, [
        put(20, "b", 4), delete(20, "a", old=True), commit(20, "b"),  # update, delete
        delete(22, "c", old=True), put(22, "c2", 5), commit(22, "c2"),  # primary key moves
        put(24, "d", 6), commit(24, "d"), delete(26, "d", old=False), commit(26, "d"),
        log.resolved(1, 30),
    ])  # fmt: skip
    ViewJob(config, spark).run(once=True)

    def table(*rows: tuple[str, int]) -> list[dict[str, Any]]:
        return sorted((value(k, n) for k, n in rows), key=lambda r: r["key"])

    kv = tmp_path / "out" / "kv"
    got = [sorted(delta.read_arrow(str(kv), v).to_pylist(), key=lambda r: r["key"])
           for v in (0, 1)]  # fmt: skip
    assert got == [table(("a", 1), ("b", 2), ("c", 3)), table(("b", 4), ("c2", 5))]
    by_op = delta.read_arrow(str(tmp_path / "out" / "by_op")).to_pylist()
    # value(): op is fields[1] (n * 10 + 1), region fields[3] (n * 10 + 3)
    assert sorted(by_op, key=lambda r: r["op"]) == [
        {"op": 41, "n": 1, "r": 43}, {"op": 51, "n": 1, "r": 53}
    ]  # fmt: skip


def test_a_checkpoint_that_cannot_be_made_is_one_line(tmp_path: Path) -> None:
    """A read-only or full file system under the checkpoint: a traceback before."""
    from deltamv.errors import StorageError
    from deltamv.job.run import _lock

    (tmp_path / "a-file").write_text("")
    lock = _lock(tmp_path / "a-file" / "ck", "bank")
    with pytest.raises(StorageError, match=r"storage failed \(.*a-file/ck\): cannot take the"):
        lock.__enter__()


def test_a_snapshot_row_whose_primary_key_changes_under_one_key_leaves_no_copy(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A snapshot's rows have no change-log key, so a change finds one by primary key. A
    row's primary key may change while its key stays (TiDB's tables without a clustered
    primary key): the PUT's ``old_value`` names the row it replaces, and a key changed
    several times in a batch names the row its first change replaced. The snapshot's row
    was left beside its new version (an outside check)."""
    import json

    from tests.helpers import changelog as log

    tables = ("a", "b", "c")
    (tmp_path / "config.toml").write_text(
        '[job]\nname = "moves"\nchangelog = "changelog"\ncheckpoint = "ck"\n'
        'snapshot = "snapshot"\n\n'
        + "".join(f'[tables.{t}]\nschema = "id BIGINT, x BIGINT"\nprimary_key = ["id"]\n\n'
                  for t in tables)
        + "".join(f'[views.v{t}]\nsql = "SELECT * FROM {t}"\npath = "out/v{t}"\n\n'
                  for t in tables)
    )  # fmt: skip
    snapshot = tmp_path / "snapshot"
    for t in tables:
        (snapshot / t).mkdir(parents=True)
        (snapshot / t / "rows.jsonl").write_text(
            "".join(json.dumps({"id": i, "x": 0}) + "\n" for i in (3, 4))
        )
    (snapshot / "_snapshot.json").write_text('{"ts": 5}')

    def put(ts: int, t: str, row: dict[str, int], old: dict[str, int] | None = None) -> log.Event:
        extra = {"old_value": old} if old else {}
        return log.put(1, ts, f"{t}/3", row, table=t, **extra)

    def commit(ts: int, t: str) -> log.Event:
        return log.commit(1, ts, ts + 1, f"{t}/3", table=t)

    delete = {"region": 1, "type": "PREWRITE", "start_ts": 30, "table": "c", "key": "c/3",
              "op": "DELETE"}  # fmt: skip
    log.write_segment(tmp_path / "changelog", 1, 1, [
        log.initialized(1, "", ""),
        # a: the snapshot's row 3 updated (found by primary key), then moved to 30
        put(10, "a", {"id": 3, "x": 1}), commit(10, "a"),
        put(20, "a", {"id": 30, "x": 1}, {"id": 3, "x": 1}), commit(20, "a"),
        # b: moved to 30 at once, its old_value naming the snapshot's row
        put(12, "b", {"id": 30, "x": 1}, {"id": 3, "x": 0}), commit(12, "b"),
        # c: updated, moved, then deleted by key alone
        put(14, "c", {"id": 3, "x": 1}), commit(14, "c"),
        put(22, "c", {"id": 30, "x": 1}, {"id": 3, "x": 1}), commit(22, "c"),
        delete, commit(30, "c"),
        log.resolved(1, 40),
    ])  # fmt: skip
    said = run_saying(spark, tmp_path / "config.toml", caplog)
    # the start's version is said, before batch 0 (which commits nothing of it) is
    assert "snapshot: published as the first version of 3 output(s), watermark 5" in said, said

    got = {t: sorted((r["id"], r["x"]) for r in delta.read_arrow(str(tmp_path / "out" / f"v{t}"))
                     .to_pylist()) for t in tables}  # fmt: skip
    assert got == {"a": [(4, 0), (30, 1)], "b": [(4, 0), (30, 1)], "c": [(4, 0)]}


def _one_table_job(tmp_path: Path, name: str, snapshot: dict[str, str] | None = None) -> Any:
    """A job over table ``t`` (id, x) with one view, ``n``: COUNT(*); with ``snapshot``
    (file name -> rows as JSON lines), from a snapshot at ts 5 holding those files."""
    text = f'[job]\nname = "{name}"\nchangelog = "changelog"\ncheckpoint = "ck"\n'
    if snapshot is not None:
        text += 'snapshot = "snapshot"\n'
        (tmp_path / "snapshot" / "t").mkdir(parents=True)
        for file, lines in snapshot.items():
            (tmp_path / "snapshot" / "t" / file).write_text(lines)
        (tmp_path / "snapshot" / "_snapshot.json").write_text('{"ts": 5}')
    (tmp_path / "config.toml").write_text(
        text + '\n[tables.t]\nschema = "id BIGINT, x BIGINT"\nprimary_key = ["id"]\n\n'
        '[views.n]\nsql = "SELECT COUNT(*) AS n FROM t"\npath = "out/n"\n'
    )
    (tmp_path / "changelog").mkdir(exist_ok=True)
    return load_config(tmp_path / "config.toml")


def test_a_snapshot_start_evaluates_the_views_over_the_rows_as_loaded_not_read_back(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The snapshot's rows go into the mirror and, as they come, into the file the views'
    first evaluation reads: the mirror is not read back for it. The first version holds
    every row of every part of the snapshot."""
    from deltamv.state.keyed import KeyedTable

    scanned: list[str] = []
    real_scan = KeyedTable.scan

    def scan(self: KeyedTable, *args: Any, **kwargs: Any) -> Any:
        scanned.append(self.name)
        return real_scan(self, *args, **kwargs)

    monkeypatch.setattr(KeyedTable, "scan", scan)
    config = _one_table_job(tmp_path, "loaded", {
        "a.jsonl": '{"id": 3, "x": 0}\n{"id": 4, "x": null}\n', "b.jsonl": '{"id": 5, "x": 1}\n'})  # fmt: skip
    ViewJob(config, spark).run(once=True)
    assert "m_t" not in scanned
    expected = spark.createDataFrame([(3,)], "n BIGINT NOT NULL")
    assert_df_equality(rows(spark, tmp_path / "out" / "n"), expected, ignore_nullable=True)


def test_a_delete_by_key_alone_of_a_snapshot_row_is_named_at_its_record(
    spark: Any, tmp_path: Path
) -> None:
    """Which snapshot row (they have no keys) a DELETE without its old_value removes is
    unknown: the job stops, naming the file and line of the DELETE's PREWRITE, read by
    an earlier batch than its COMMIT; nothing of the batch is committed."""
    import json

    from deltamv.errors import BadRecordError
    from tests.helpers import changelog as log

    config = _one_table_job(tmp_path, "blind", {"rows.jsonl": '{"id": 3, "x": 0}\n'})
    changelog = tmp_path / "changelog"
    delete = {"region": 1, "type": "PREWRITE", "start_ts": 30, "table": "t", "key": "t/3",
              "op": "DELETE"}  # fmt: skip
    first = log.write_segment(changelog, 1, 1, [log.initialized(1, "", ""), log.resolved(1, 20),
                                                delete, log.resolved(1, 30)])  # fmt: skip
    ViewJob(config, spark).run(once=True)
    log.write_segment(changelog, 1, 2, [log.commit(1, 30, 31, "t/3", table="t"),
                                        log.resolved(1, 40)])  # fmt: skip
    with pytest.raises(BadRecordError) as raised:
        ViewJob(config, spark).run(once=True)
    assert str(raised.value) == (
        f"bad record at {first}:3: a DELETE of key 't/3' (commit_ts 31) names no whole old"
        " primary key (old_value), and no row of table t holds that key: the row may have"
        " come from the snapshot, whose rows have no keys, so the job cannot tell which row"
        " to delete. Give DELETEs of snapshot rows their old_value (at least the primary"
        " key), or start the job without a snapshot"
    )
    assert [v.watermark for v in delta.versions(str(tmp_path / "out" / "n"))] == [5, 30]
    assert json.loads(first.read_text().splitlines()[2])["op"] == "DELETE"


def test_a_key_that_puts_a_primary_key_another_key_holds_is_named_at_its_record(
    spark: Any, tmp_path: Path
) -> None:
    """The upstream's table holds one row per primary key: a PUT under a new key of a
    primary key another key holds (its DELETE missing) stops the job at the PUT's
    PREWRITE, and nothing of the batch is committed; a restart stops there again."""
    from deltamv.errors import BadRecordError
    from tests.helpers import changelog as log

    config = _one_table_job(tmp_path, "twice")
    changelog = tmp_path / "changelog"
    log.write_segment(changelog, 1, 1, [
        log.initialized(1, "", ""), log.put(1, 10, "t/a", {"id": 1, "x": 5}, table="t"),
        log.commit(1, 10, 11, "t/a", table="t"), log.resolved(1, 20)])  # fmt: skip
    ViewJob(config, spark).run(once=True)
    second = log.write_segment(changelog, 1, 2, [
        log.put(1, 30, "t/c", {"id": 2, "x": 1}, table="t"),
        log.put(1, 30, "t/b", {"id": 1, "x": 7}, table="t"),
        log.commit(1, 30, 31, "t/b", table="t"), log.resolved(1, 40)])  # fmt: skip
    for _ in range(2):
        with pytest.raises(BadRecordError) as raised:
            ViewJob(config, spark).run(once=True)
        assert str(raised.value) == (
            f"bad record at {second}:2: key 't/b' puts a row of table t with primary key"
            " (id=1), which key 't/a' holds: a table has one row per primary key (is a"
            " DELETE of the other row missing, or tables.t.primary_key not the table's?)"
        )
    assert [v.watermark for v in delta.versions(str(tmp_path / "out" / "n"))] == [20]


def test_a_snapshot_that_holds_a_primary_key_twice_stops_the_job(
    spark: Any, tmp_path: Path
) -> None:
    from deltamv.errors import BadRecordError

    config = _one_table_job(tmp_path, "twice", {
        "a.jsonl": '{"id": 3, "x": 0}\n{"id": 4, "x": 0}\n',
        "b.jsonl": '{"id": 5, "x": 0}\n{"id": 3, "x": 1}\n'})  # fmt: skip
    with pytest.raises(BadRecordError) as raised:
        ViewJob(config, spark).run(once=True)
    assert str(raised.value) == (
        f"bad record at {config.snapshot}/t: table t holds two rows with primary key (id=3)"
    )
    assert not (tmp_path / "out" / "n").exists()


def test_a_view_of_the_time_of_evaluation_is_recomputed_at_every_batch(
    spark: Any, bank: Path
) -> None:
    """current_timestamp() in a view: Spark's optimizer puts the time of the plan in its
    place, so a view kept incrementally stayed at the job's start; it is recomputed at
    every batch, also one that changes none of its tables (an outside check)."""
    text = (
        (bank / "config.toml").read_text().replace("[job]\n", "[job]\nmax_segments_per_batch = 1\n")
    )
    (bank / "config.toml").write_text(
        text + '\n[views.clock]\nsql = "SELECT COUNT(*) AS n, current_timestamp() AS at'
        ' FROM accounts"\npath = "out/views/clock"\n'
    )
    config = load_config(bank / "config.toml")
    job = ViewJob(config, spark)
    job.run(once=True)
    assert job.modes["clock"].startswith("recompute: current_timestamp()"), job.modes
    # Two batches in one run (a segment of each region a batch) where the watermark moves
    # and no row changes. (The start publishes nothing of it: its fingerprint is of the
    # analyzed plan, not of the optimized one, which holds the time of its making.)
    for seq, (one, two) in enumerate([(150, 140), (170, 160)], start=2):
        segment(bank, 1, seq, lines([resolved(1, one)]))
        segment(bank, 2, seq, lines([resolved(2, two)]))
    reports = ViewJob(config, spark).run(once=True)
    assert [r.watermark for r in reports if r.committed] == [140, 160]
    clock = bank / "out" / "views" / "clock"
    assert [v.watermark for v in delta.versions(str(clock))] == [115, 140, 160]
    at = [rows(spark, clock, v).collect() for v in (0, 1, 2)]
    assert [[r.n for r in version] for version in at] == [[3], [3], [3]]
    assert at[0][0].at < at[1][0].at < at[2][0].at
