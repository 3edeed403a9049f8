from __future__ import annotations

import gc
import json
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import PySparkException
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxFiles

from deltamv.changelog.events import EVENT_SCHEMA
from deltamv.changelog.source import (
    SOURCE_NAME,
    ChangelogStreamReader,
    read_events,
    register,
    tables_option,
)
from deltamv.errors import BadRecordError, ConfigError, wire
from deltamv.errors import unwire as bad_record_from_exception
from tests.helpers.changelog import TABLES, commit, put, resolved, write_segment


def reader(changelog: Path, **options: str) -> ChangelogStreamReader:
    return ChangelogStreamReader(
        {"path": str(changelog), "tables": tables_option(TABLES), **options}
    )


def regions(offset: dict[str, Any]) -> dict[str, int]:
    return offset["regions"]


# -- planning, without Spark ----------------------------------------------------------------


def test_offsets_cover_whole_segments_and_resume(changelog: Path) -> None:
    r = reader(changelog)
    start = r.initialOffset()
    assert start == {"regions": {}}
    assert r.latestOffset(start, ReadAllAvailable()) == start
    write_segment(changelog, 1, 1, [resolved(1, 1)])
    write_segment(changelog, 1, 2, [resolved(1, 2)])
    write_segment(changelog, 2, 5, [resolved(2, 1)])
    end = r.latestOffset(start, ReadAllAvailable())
    assert end == {"regions": {"1": 2, "2": 5}}
    parts = r.partitions(start, end)
    assert [(p.region, [s[0] for s in p.segments]) for p in parts] == [(1, [1, 2]), (2, [5])]
    assert r.latestOffset(end, ReadAllAvailable()) == end
    write_segment(changelog, 2, 6, [resolved(2, 2)])
    later = r.latestOffset(end, ReadAllAvailable())
    assert later == {"regions": {"1": 2, "2": 6}}
    assert [(p.region, [s[0] for s in p.segments]) for p in r.partitions(end, later)] == [(2, [6])]


def test_a_segment_that_appears_below_what_was_read_stops_the_job(changelog: Path) -> None:
    write_segment(changelog, 1, 1, [resolved(1, 1)])
    write_segment(changelog, 1, 3, [resolved(1, 3)])
    r = reader(changelog)
    end = r.latestOffset(r.initialOffset(), ReadAllAvailable())
    assert end == {"regions": {"1": 3}}
    write_segment(changelog, 1, 4, [resolved(1, 4)])
    assert r.latestOffset(end, ReadAllAvailable()) == {"regions": {"1": 4}}
    late = write_segment(changelog, 1, 2, [resolved(1, 2)])  # the gap, filled too late
    with pytest.raises(BadRecordError, match="appeared after region 1 was read up to seq 3") as e:
        r.latestOffset(end, ReadAllAvailable())
    assert e.value.file == str(late)


def test_the_reader_plans_only_the_unread_segments(changelog: Path) -> None:
    for seq in range(1, 201):
        write_segment(changelog, 1, seq, [resolved(1, seq)])
    r = reader(changelog)
    start = r.initialOffset()
    end = r.latestOffset(start, ReadMaxFiles(150))
    assert end == {"regions": {"1": 150}}
    rest = r.latestOffset(end, ReadAllAvailable())
    assert rest == {"regions": {"1": 200}}
    (part,) = r.partitions(end, rest)
    assert [s[0] for s in part.segments] == list(range(151, 201))


def test_the_planner_holds_its_backlog_not_the_logs_history(tmp_path: Path) -> None:
    """A continuous job's planner must not grow with the segments it has already read."""

    def held_after_reading(segments: int) -> int:
        log = tmp_path / f"log-{segments}"
        for seq in range(1, segments + 1):
            write_segment(log, 1, seq, [resolved(1, seq)])
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            r = reader(log)
            end = r.latestOffset(r.initialOffset(), ReadAllAvailable())
            assert end == {"regions": {"1": segments}}
            assert r.latestOffset(end, ReadAllAvailable()) == end  # the next planning round
            gc.collect()
            return tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()

    held_after_reading(10)  # warm up what is cached once per process
    # Keeping one Segment per file read would hold about 240 bytes a segment (475 kB here).
    assert held_after_reading(2000) < held_after_reading(50) + 100_000


def test_a_late_segment_is_caught_after_another_went_missing(changelog: Path) -> None:
    """A missing segment must not hide a late one from the count check."""
    for seq in (0, 1, 2):
        write_segment(changelog, 1, seq, [resolved(1, seq + 1)])
    r = reader(changelog)
    offset = r.latestOffset(r.initialOffset(), ReadMaxFiles(1))
    assert offset == {"regions": {"1": 0}}
    gone = changelog / "region-1" / "000002.jsonl"
    text = gone.read_text()
    gone.unlink()  # not read yet; the upstream withdrew it
    offset = r.latestOffset(offset, ReadMaxFiles(1))
    write_segment(changelog, 1, 3, [resolved(1, 4)])
    offset = r.latestOffset(offset, ReadMaxFiles(1))
    assert offset == {"regions": {"1": 3}}
    gone.write_text(text)  # back, below what was read
    with pytest.raises(BadRecordError, match="appeared after region 1") as e:
        r.latestOffset(offset, ReadMaxFiles(1))
    assert e.value.file == str(gone)


def test_a_late_segment_is_caught_when_a_read_one_went_missing_at_once(changelog: Path) -> None:
    for seq in (0, 2, 4):
        write_segment(changelog, 1, seq, [resolved(1, seq + 1)])
    r = reader(changelog)
    offset = r.latestOffset(r.initialOffset(), ReadAllAvailable())
    (changelog / "region-1" / "000002.jsonl").unlink()  # the ledger reports this one
    late = write_segment(changelog, 1, 1, [resolved(1, 2)])  # same count below the offset
    with pytest.raises(BadRecordError, match="appeared after region 1") as e:
        r.latestOffset(offset, ReadAllAvailable())
    assert e.value.file == str(late)


def test_a_second_file_for_a_seq_already_read_stops_the_job(changelog: Path) -> None:
    write_segment(changelog, 1, 3, [resolved(1, 3)])
    r = reader(changelog)
    end = r.latestOffset(r.initialOffset(), ReadAllAvailable())
    twin = changelog / "region-1" / "3.jsonl"
    twin.write_text(json.dumps(resolved(1, 3)) + "\n")
    with pytest.raises(BadRecordError, match="segment seq 3 also used by"):
        r.latestOffset(end, ReadAllAvailable())


def test_cap_takes_whole_segments_round_robin(changelog: Path) -> None:
    for region in (1, 2, 3):
        for seq in (1, 2, 3):
            write_segment(changelog, region, seq, [resolved(region, seq)])
    r = reader(changelog, maxSegmentsPerTrigger="2")
    assert r.getDefaultReadLimit() == ReadMaxFiles(2)
    offset = r.initialOffset()
    taken = []
    for _ in range(5):
        end = r.latestOffset(offset, ReadMaxFiles(2))
        taken.append({k: v - regions(offset).get(k, 0) for k, v in regions(end).items()})
        offset = end
    assert taken[0] == {"1": 1, "2": 1}
    assert taken[1] == {"1": 1, "2": 0, "3": 1}  # region 3 is not starved
    assert sum(sum(t.values()) for t in taken) == 9
    assert regions(offset) == {"1": 3, "2": 3, "3": 3}
    assert r.latestOffset(offset, ReadMaxFiles(2)) == offset
    # ReadAllAvailable (e.g. Trigger.Once) ignores the cap.
    assert regions(r.latestOffset(r.initialOffset(), ReadAllAvailable())) == regions(offset)


def test_available_now_stops_at_the_listing_at_start(changelog: Path) -> None:
    write_segment(changelog, 1, 1, [resolved(1, 1)])
    r = reader(changelog)
    r.prepareForTriggerAvailableNow()
    write_segment(changelog, 1, 2, [resolved(1, 2)])
    write_segment(changelog, 9, 1, [resolved(9, 2)])
    assert r.latestOffset(r.initialOffset(), ReadAllAvailable()) == {"regions": {"1": 1}}


def test_segment_appearing_below_the_read_offset_is_a_bad_record(changelog: Path) -> None:
    write_segment(changelog, 1, 5, [resolved(1, 1)])
    r = reader(changelog)
    end = r.latestOffset(r.initialOffset(), ReadAllAvailable())
    late = write_segment(changelog, 1, 3, [resolved(1, 0)])
    with pytest.raises(BadRecordError) as info:
        r.latestOffset(end, ReadAllAvailable())
    assert info.value.file == str(late)
    assert bad_record_from_exception(info.value) is not None


def test_bad_options() -> None:
    with pytest.raises(ConfigError, match="path"):
        ChangelogStreamReader({"tables": "{}"})
    with pytest.raises(ConfigError, match="tables"):
        ChangelogStreamReader({"path": "/x", "tables": "[1]"})
    with pytest.raises(ConfigError, match=r"tables\.t"):
        ChangelogStreamReader({"path": "/x", "tables": json.dumps({"t": "id WIDGET"})})
    with pytest.raises(ConfigError, match="maxSegmentsPerTrigger"):
        ChangelogStreamReader({"path": "/x", "tables": "{}", "maxSegmentsPerTrigger": "0"})


def test_bad_record_from_wrapped_text() -> None:
    err = BadRecordError("/data/region-1/000001.jsonl", 7, 'unknown op "X"')
    wrapped = RuntimeError(
        f"Job aborted.\nTraceback...\ndeltamv.errors.BadRecordError: {wire(err)}\n\tat x"
    )
    got = bad_record_from_exception(wrapped)
    assert got is not None and (got.file, got.line, got.reason) == (err.file, 7, err.reason)
    try:
        try:
            raise err
        except BadRecordError as inner:
            raise RuntimeError("outer") from inner
    except RuntimeError as outer:
        assert str(bad_record_from_exception(outer)) == str(err)
    assert bad_record_from_exception(RuntimeError("something else")) is None


# -- end to end, with Spark -------------------------------------------------------------------


class Collector:
    def __init__(self) -> None:
        self.batches: list[tuple[int, list[tuple[int, int, int, str]]]] = []

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = df.orderBy("region", "seq", "line").collect()
        self.batches.append((batch_id, [(r.region, r.seq, r.line, r.type) for r in rows]))

    def rows(self) -> list[tuple[int, int, int, str]]:
        return [row for _, rows in self.batches for row in rows]


def run_query(spark: Any, changelog: Path, checkpoint: Path, sink: Any, **options: str) -> None:
    stream = (
        spark.readStream.format(SOURCE_NAME)
        .option("path", str(changelog))
        .option("tables", tables_option(TABLES))
    )
    for key, value in options.items():
        stream = stream.option(key, value)
    query = (
        stream.load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


def test_stream_two_rounds_resume_without_rereading(
    spark: Any, changelog: Path, tmp_path: Path
) -> None:
    register(spark)  # idempotent: build_spark registered it already
    write_segment(changelog, 1, 1, [put(1, 10, "a1", {"id": 1}), commit(1, 10, 11, "a1")])
    write_segment(changelog, 1, 2, [resolved(1, 11)])
    write_segment(changelog, 2, 1, [resolved(2, 3)])
    (changelog / "region-2" / ".000002.jsonl").write_text("half a li")  # in progress
    sink = Collector()
    run_query(spark, changelog, tmp_path / "ck", sink, maxSegmentsPerTrigger="2")
    first = sorted(sink.rows())
    assert first == [
        (1, 1, 1, "PREWRITE"),
        (1, 1, 2, "COMMIT"),
        (1, 2, 1, "RESOLVED"),
        (2, 1, 1, "RESOLVED"),
    ]
    assert len(sink.batches) == 2  # the cap split the three segments

    write_segment(changelog, 2, 2, [resolved(2, 4)])
    write_segment(changelog, 3, 1, [{"region": 3, "type": "RETIRED"}])
    sink2 = Collector()
    run_query(spark, changelog, tmp_path / "ck", sink2)
    assert sorted(sink2.rows()) == [(2, 2, 1, "RESOLVED"), (3, 1, 1, "RETIRED")]
    assert min(b for b, _ in sink2.batches) > max(b for b, _ in sink.batches)


def test_stream_stops_on_bad_record_and_names_file_and_line(
    spark: Any, changelog: Path, tmp_path: Path
) -> None:
    write_segment(changelog, 1, 1, [resolved(1, 1)])
    bad = write_segment(changelog, 2, 1, [resolved(2, 1), put(2, 5, "a", {"id": "one"})])
    sink = Collector()
    with pytest.raises(PySparkException) as info:
        run_query(spark, changelog, tmp_path / "ck", sink)
    err = bad_record_from_exception(info.value)
    assert err is not None
    assert (err.file, err.line) == (str(bad), 2)
    assert "column 'id'" in err.reason and "\n" not in str(err)
    assert sink.batches == []  # nothing of the failed batch was handed on


def test_batch_read_events_between_offsets(spark: Any, changelog: Path) -> None:
    write_segment(changelog, 1, 1, [resolved(1, 1)])
    write_segment(changelog, 1, 2, [resolved(1, 2), resolved(1, 3)])
    write_segment(changelog, 2, 1, [resolved(2, 1)])
    df = read_events(spark, str(changelog), TABLES, {1: 1}, {1: 2, 2: 1})
    assert df.schema.fieldNames() == EVENT_SCHEMA.names
    assert sorted((r.region, r.seq, r.ts) for r in df.collect()) == [
        (1, 2, 2),
        (1, 2, 3),
        (2, 1, 1),
    ]


def test_batch_read_events_with_nothing_new(spark: Any, changelog: Path) -> None:
    write_segment(changelog, 1, 1, [resolved(1, 1)])
    assert read_events(spark, str(changelog), TABLES, {1: 1}, {1: 1}).count() == 0
