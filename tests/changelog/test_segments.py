from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deltamv.changelog.segments import Segment, SeqRuns, list_segments, scan_region
from deltamv.errors import BadRecordError, DeltaMVError
from tests.helpers.changelog import resolved, write_segment


def test_lists_regions_and_segments_in_seq_order(changelog: Path) -> None:
    write_segment(changelog, 7, 10, [resolved(7, 1)])
    write_segment(changelog, 7, 2, [resolved(7, 1)])
    write_segment(changelog, 3, 1, [resolved(3, 1)])
    (changelog / "region-7" / "000005.parquet").write_bytes(b"")
    listing = list_segments(str(changelog))
    assert list(listing) == [3, 7]
    assert [(s.seq, s.fmt) for s in listing[7]] == [(2, "jsonl"), (5, "parquet"), (10, "jsonl")]
    assert listing[3] == [Segment(3, 1, str(changelog / "region-3" / "000001.jsonl"), "jsonl")]


def test_ignores_in_progress_and_hidden_names(changelog: Path) -> None:
    write_segment(changelog, 1, 1, [resolved(1, 1)])
    (changelog / "region-1" / ".000002.jsonl.tmp").write_text("partial")
    (changelog / "region-1" / "_000003.jsonl").write_text("partial")
    (changelog / ".DS_Store").write_text("")
    (changelog / "_region-9").mkdir()
    listing = list_segments(str(changelog))
    assert {r: [s.seq for s in v] for r, v in listing.items()} == {1: [1]}


@pytest.mark.parametrize("name", ["001.json", "abc.jsonl", "1.2.jsonl", "notes.txt"])
def test_unexpected_segment_name_is_a_bad_record(changelog: Path, name: str) -> None:
    write_segment(changelog, 1, 1, [resolved(1, 1)])
    (changelog / "region-1" / name).write_text("")
    with pytest.raises(BadRecordError) as info:
        list_segments(str(changelog))
    assert info.value.file == str(changelog / "region-1" / name)
    assert info.value.line is None


@pytest.mark.parametrize("name", ["region-x", "regions", "other"])
def test_unexpected_directory_is_a_bad_record(changelog: Path, name: str) -> None:
    (changelog / name).mkdir()
    with pytest.raises(BadRecordError, match=name):
        list_segments(str(changelog))


def test_duplicate_seq_is_a_bad_record(changelog: Path) -> None:
    write_segment(changelog, 1, 1, [resolved(1, 1)])
    (changelog / "region-1" / "1.jsonl").write_text("")
    with pytest.raises(BadRecordError, match="seq 1"):
        list_segments(str(changelog))


def test_missing_changelog_directory(tmp_path: Path) -> None:
    with pytest.raises(DeltaMVError, match="does not exist"):
        list_segments(str(tmp_path / "nope"))


def test_empty_changelog(changelog: Path) -> None:
    assert list_segments(str(changelog)) == {}


def test_scan_region_keeps_only_segments_after_the_floor(changelog: Path) -> None:
    for seq in (1, 2, 3, 5):
        write_segment(changelog, 4, seq, [])
    scan = scan_region(4, str(changelog / "region-4"), after=2)
    assert [s.seq for s in scan.segments] == [3, 5]
    assert scan.below == 2


@given(
    st.sets(st.integers(min_value=0, max_value=60)),
    st.sets(st.integers(min_value=0, max_value=60)),
    st.integers(min_value=-2, max_value=64),
)
def test_seq_runs_hold_exactly_their_seqs(first: set[int], more: set[int], probe: int) -> None:
    runs = SeqRuns.of(first)
    assert (probe in runs) == (probe in first)
    assert len(runs) == len(first)
    assert runs.count_at_most(probe) == sum(1 for s in first if s <= probe)
    runs.add(more)
    assert (probe in runs) == (probe in first | more)
    assert len(runs) == len(first | more)
    assert runs.count_at_most(probe) == sum(1 for s in first | more if s <= probe)
    runs.drop_above(probe)
    kept = {s for s in first | more if s <= probe}
    assert len(runs) == len(kept)
    assert all((s in runs) == (s in kept) for s in range(-2, 65))
