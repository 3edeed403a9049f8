from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from deltamv.pipeline.frontier import RegionState, global_watermark, min_span, unread_ancestors


def test_uncovered_key_space_stays_at_start_ts() -> None:
    regions = {1: RegionState(1, "", "m", resolved=50)}
    assert global_watermark(regions, start_ts=7) == 7
    blocker = min_span(regions, 7)
    assert (blocker.start_key, blocker.end_key, blocker.region) == ("m", "", None)


def test_minimum_over_a_partition() -> None:
    regions = {
        1: RegionState(1, "", "g", resolved=50),
        2: RegionState(2, "g", "p", resolved=30),
        3: RegionState(3, "p", "", resolved=70),
    }
    assert global_watermark(regions, 0) == 30
    assert min_span(regions, 0).region == 2


def test_region_without_resolved_does_not_count() -> None:
    regions = {1: RegionState(1, "", "g", resolved=50), 2: RegionState(2, "g", "")}
    assert global_watermark(regions, 0) == 0


def test_successor_counts_only_after_parent_retired() -> None:
    parent = RegionState(1, "", "", resolved=40)
    left = RegionState(2, "", "k", parents=(1,), resolved=90)
    right = RegionState(3, "k", "", parents=(1,), resolved=80)
    # Parent still streaming: the successors' promises are incomplete.
    assert global_watermark({1: parent, 2: left, 3: right}, 0) == 40
    waiting = {2: left, 3: right}  # parent's stream not read at all yet
    assert global_watermark(waiting, 0) == 0
    assert min_span(waiting, 0).reason.startswith("successor waiting")
    retired = RegionState(1, "", "", resolved=40, retired=True)
    assert global_watermark({1: retired, 2: left, 3: right}, 0) == 80


def test_the_region_named_is_the_successor_waiting_not_its_parent() -> None:
    # Neither counts: the parent has not resolved yet, its successor waits for its
    # RETIRED. The successor holds the span (the parent used to be named, with no parent).
    parent = RegionState(1, "", "")
    successor = RegionState(6, "", "k", parents=(1,), resolved=90)
    blocker = min_span({1: parent, 6: successor}, 0)
    assert (blocker.region, blocker.reason) == (6, "successor waiting for its parent's RETIRED")
    blocker = min_span({1: parent}, 0)
    assert (blocker.region, blocker.reason) == (1, "no resolved ts from it yet")
    # A split of a split: its parent is read to its end, its grandparent is not.
    grandparent = RegionState(1, "", "", resolved=10)
    middle = RegionState(2, "", "", parents=(1,), resolved=20, retired=True)
    child = RegionState(3, "", "k", parents=(2,), resolved=30)
    regions = {2: middle, 3: child}  # the grandparent's stream not read at all yet
    blocker = min_span(regions, 0)
    assert (blocker.region, blocker.reason) == (3, "successor waiting for its parent's RETIRED")
    assert unread_ancestors(regions, 3) == (1,)
    assert unread_ancestors({1: grandparent, 2: middle, 3: child}, 3) == (1,)
    assert unread_ancestors({1: grandparent, 2: middle, 3: child}, 2) == (1,)


def test_merge_needs_every_parent() -> None:
    a = RegionState(1, "", "k", resolved=40, retired=True)
    b = RegionState(2, "k", "", resolved=45)
    merged = RegionState(3, "", "", parents=(1, 2), resolved=100)
    assert global_watermark({1: a, 2: b, 3: merged}, 0) == 40
    b_retired = RegionState(2, "k", "", resolved=45, retired=True)
    assert global_watermark({1: a, 2: b_retired, 3: merged}, 0) == 100


def test_grandparents_must_be_retired_too() -> None:
    g = RegionState(1, "", "", resolved=10)  # not retired
    p = RegionState(2, "", "", parents=(1,), resolved=20, retired=True)
    c = RegionState(3, "", "", parents=(2,), resolved=30)
    assert global_watermark({1: g, 2: p, 3: c}, 0) == 10


@settings(max_examples=200, deadline=None)
@given(
    cuts=st.lists(st.sampled_from("bcdefghijklmnopqrstuvwxy"), unique=True, max_size=6),
    stamps=st.lists(st.integers(0, 1000), min_size=7, max_size=7),
    start=st.integers(0, 100),
)
def test_watermark_is_min_over_any_partition(
    cuts: list[str], stamps: list[int], start: int
) -> None:
    bounds = ["", *sorted(cuts), ""]
    regions = {
        i: RegionState(i, bounds[i], bounds[i + 1], resolved=stamps[i])
        for i in range(len(bounds) - 1)
    }
    expected = max(start, min(stamps[: len(bounds) - 1]))
    assert global_watermark(regions, start) == expected
