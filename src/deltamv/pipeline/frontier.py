"""The span frontier: from per-region resolved timestamps to the global watermark.

docs/changelog-format.md, guarantees 4 and 5. Each point of the key space is resolved at the
highest ts any *counting* region reported for it; a region counts once it sent
``INITIALIZED`` and every ancestor named in ``parents`` (transitively) has been read
through its ``RETIRED``: a successor's initial scan only re-emits what committed
after its parent's last resolved ts, so before the parent's stream is fully read,
the successor's promise is incomplete. Points no counting region ever covered stand
at the job's start ts. The global watermark is the minimum over the key space.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

# Key-space bound standing for "unbounded" (end_key == ""): sorts after every key.
_END = None


@dataclass(frozen=True)
class RegionState:
    region: int
    start_key: str | None = None
    end_key: str | None = None  # "" means unbounded
    parents: tuple[int, ...] = ()
    resolved: int | None = None
    retired: bool = False

    @property
    def initialized(self) -> bool:
        return self.start_key is not None


@dataclass(frozen=True)
class Blocker:
    """What holds the global watermark back: a region, or a span nobody covers yet."""

    watermark: int
    start_key: str
    end_key: str
    region: int | None  # None: the span is uncovered or covered only by non-counting regions
    reason: str


def counting_regions(regions: Mapping[int, RegionState]) -> list[RegionState]:
    """Regions whose resolved ts counts: initialized, resolved, all ancestors retired."""
    memo: dict[int, bool] = {}

    def ancestors_read(region_id: int, trail: frozenset[int]) -> bool:
        if region_id in memo:
            return memo[region_id]
        state = regions.get(region_id)
        ok = True
        for parent in state.parents if state else ():
            if parent in trail:
                ok = False  # a lineage cycle is nonsense; never let it count
                break
            pstate = regions.get(parent)
            if pstate is None or not pstate.retired or not ancestors_read(parent, trail | {parent}):
                ok = False
                break
        memo[region_id] = ok
        return ok

    return [
        s
        for s in regions.values()
        if s.initialized
        and s.resolved is not None
        and ancestors_read(s.region, frozenset({s.region}))
    ]


def unread_ancestors(regions: Mapping[int, RegionState], region_id: int) -> tuple[int, ...]:
    """The ancestors of a region, of every generation, not yet read to their RETIRED
    (those it waits for before it counts), in id order."""
    found: set[int] = set()
    todo = list(regions[region_id].parents) if region_id in regions else []
    seen: set[int] = set()
    while todo:
        ancestor = todo.pop()
        if ancestor in seen:
            continue
        seen.add(ancestor)
        state = regions.get(ancestor)
        if state is None or not state.retired:
            found.add(ancestor)
        if state is not None:
            todo.extend(state.parents)
    return tuple(sorted(found))


def global_watermark(regions: Mapping[int, RegionState], start_ts: int) -> int:
    """The minimum over the key space of each point's highest counting resolved ts."""
    return min_span(regions, start_ts).watermark


def min_span(regions: Mapping[int, RegionState], start_ts: int) -> Blocker:
    """The span with the lowest resolved ts, with the region responsible for it."""
    spans = [
        (s.start_key or "", s.end_key or "", max(s.resolved or 0, start_ts), s.region)
        for s in counting_regions(regions)
    ]
    # Cut at every initialized region's bounds too, so a span held back by a successor
    # waiting for its parent is named precisely.
    extra = [s.start_key or "" for s in regions.values() if s.initialized] + [
        s.end_key or "" for s in regions.values() if s.initialized
    ]
    best: Blocker | None = None
    for lo, hi, covering in _elementary(spans, extra):
        region: int | None
        if covering:
            ts, region = max((c[0], c[1]) for c in covering)
            reason = "lowest resolved ts"
        else:
            ts = start_ts
            region, reason = _waiting_region(regions, lo, hi)
        if best is None or ts < best.watermark:
            best = Blocker(ts, lo, hi, region, reason)
    assert best is not None
    return best


def _elementary(
    spans: Iterable[tuple[str, str, int, int]], extra_cuts: Iterable[str] = ()
) -> list[tuple[str, str, list[tuple[int, int]]]]:
    """Cut the key space at every span boundary; list the spans covering each piece."""
    spans = list(spans)
    cuts = sorted(
        {"", *extra_cuts}
        | {lo for lo, _, _, _ in spans}
        | {hi for _, hi, _, _ in spans if hi != ""}
    )
    pieces: list[tuple[str, str, list[tuple[int, int]]]] = []
    for i, lo in enumerate(cuts):
        hi = cuts[i + 1] if i + 1 < len(cuts) else ""
        covering = [
            (ts, region)
            for s_lo, s_hi, ts, region in spans
            if s_lo <= lo and (s_hi == "" or (hi != "" and hi <= s_hi))
        ]
        pieces.append((lo, hi, covering))
    return pieces


def _waiting_region(regions: Mapping[int, RegionState], lo: str, hi: str) -> tuple[int | None, str]:
    """The initialized region covering [lo, hi) whose reports do not count yet, and why:
    a successor waiting for a parent's RETIRED first (the parent, which may cover the
    span too, is what it waits for, not what holds it), then one with no resolved ts."""
    covering = []
    for s in sorted(regions.values(), key=lambda r: r.region):
        s_lo, s_hi = s.start_key or "", s.end_key or ""
        if (
            s.initialized
            and not s.retired
            and s_lo <= lo
            and (s_hi == "" or (hi != "" and hi <= s_hi))
        ):
            covering.append(s)
    for s in covering:
        if unread_ancestors(regions, s.region):
            return s.region, "successor waiting for its parent's RETIRED"
    for s in covering:
        if s.resolved is None:
            return s.region, "no resolved ts from it yet"
    if covering:
        return covering[0].region, "successor waiting for its parent's RETIRED"
    return None, "no region has covered this span yet"
