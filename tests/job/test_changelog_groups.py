"""How a batch takes segments parsed ahead (``job.changelog``): region by region, and
joined, the same events as parsing the batch's segments itself."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deltamv.changelog.segments import Segment
from deltamv.config import load_config
from deltamv.job.changelog import ChangelogUpstream, _joined, _Queue
from tests.helpers.bank import GOOD_1_2, GOOD_2_2, segment, write_start


def _segments(counts: dict[int, int]) -> list[Segment]:
    return [
        Segment(r, seq, f"region-{r}/{seq:06d}.jsonl", "jsonl")
        for r, n in sorted(counts.items())
        for seq in range(1, n + 1)
    ]


def test_a_group_is_taken_where_it_holds_what_each_of_its_regions_reads_next() -> None:
    batch = _segments({1: 3, 2: 2})
    r1, r2 = batch[:3], batch[3:]
    queue = _Queue(batch)
    assert queue.take(r2[:1])  # region 2 first: regions have no order between them
    assert queue.take([r1[0], r2[1]])  # a group over both regions, each its next
    assert not queue.take(r1[2:])  # region 1's third before its second: not its next
    assert not queue.take(r1[1:2])  # region 1 closed: nothing of it after a misfit
    assert not queue.empty
    assert queue.rest() == tuple(r1[1:])
    assert not _Queue(batch).take(_segments({3: 1}))  # a region the batch does not read


@settings(max_examples=200, deadline=None)
@given(
    counts=st.dictionaries(st.integers(1, 4), st.integers(1, 5), min_size=1),
    cuts=st.lists(st.tuples(st.integers(1, 4), st.integers(0, 6), st.integers(1, 3))),
)
def test_what_is_taken_and_what_is_left_make_the_batch_each_region_in_order(
    counts: dict[int, int], cuts: list[tuple[int, int, int]]
) -> None:
    """Any groups offered (a run of a region's segments each): the taken ones and the
    rest hold every segment of the batch once, each region's in its order."""
    batch = _segments(counts)
    queue = _Queue(batch)
    taken: list[Segment] = []
    for region, start, length in cuts:
        group = [s for s in batch if s.region == region][start : start + length]
        if group and queue.take(group):
            taken.extend(group)
    rest = queue.rest()
    assert sorted(taken + list(rest)) == sorted(batch)
    for region in counts:
        order = [s for s in taken + list(rest) if s.region == region]
        assert order == [s for s in batch if s.region == region]
    assert queue.empty == (not rest)


def test_groups_parsed_apart_and_joined_are_the_groups_parsed_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The events, each table's value rows (their ``row`` pointing at their event) and
    the fingerprints of joined groups are those of one parse of the same segments."""
    write_start(tmp_path)
    segment(tmp_path, 1, 2, GOOD_1_2)
    segment(tmp_path, 2, 2, GOOD_2_2)
    monkeypatch.chdir(tmp_path)
    upstream = ChangelogUpstream(load_config(tmp_path / "config.toml"), tmp_path / "spark")
    files = sorted((tmp_path / "changelog").rglob("*.jsonl"))
    segs = [Segment(int(p.parent.name.split("-")[1]), int(p.stem), str(p), "jsonl") for p in files]
    joined, records = _joined([upstream._parse(segs[:1]), upstream._parse(segs[1:3]),
                               upstream._parse(segs[3:])])  # fmt: skip
    whole, whole_records = upstream._parse(segs)
    assert joined.files == whole.files
    assert joined.events.equals(whole.events)
    assert set(joined.values) == set(whole.values)
    for name, table in whole.values.items():
        assert pa.concat_tables([joined.values[name]]).equals(table)
    assert records == whole_records
