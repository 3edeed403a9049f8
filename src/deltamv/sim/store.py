"""The simulated store: TSO, MVCC rows, Percolator locks, regions and their CDC streams.

Every region owns a key span and an ordered event buffer (its change-log stream).
The store enforces what docs/changelog-format.md promises: locks are emitted as
``PREWRITE`` in the region that owns the key, a region's first ``COMMIT`` of a
transaction follows all its prewrites there, the resolver never reports a ts that a
not-yet-shown commit could fall under, and a split or merge retires the old regions
and starts successors with an initial scan from their parents' last resolved ts.
"""

from __future__ import annotations

import itertools
import random
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any, Literal

from deltamv import tso
from deltamv.sim.workloads import Row, Write

WatermarkMode = Literal["start-ts", "min-commit-ts"]

#: Simulated time starts here (2023-11-14T22:13:20Z): fixed, so output is reproducible.
EPOCH_MS = 1_700_000_000_000


class Clock:
    """A TSO over simulated (or, live, wall-clock) milliseconds: strictly increasing."""

    def __init__(self, start_ms: int = EPOCH_MS) -> None:
        self.ms = start_ms
        self._logical = 0

    def advance_to(self, ms: int) -> None:
        if ms > self.ms:
            self.ms = ms
            self._logical = 0

    def tso(self) -> int:
        self._logical += 1
        if self._logical > tso.LOGICAL_MASK:
            self.advance_to(self.ms + 1)
            self._logical = 1
        return tso.compose(self.ms, self._logical)


@dataclass(eq=False)
class Txn:
    """One transaction's state as the store sees it."""

    start_ts: int
    kind: str  # genesis | small | large | orphan
    primary: str | None = None
    large: bool = False
    min_commit_ts: int = 0
    commit_ts: int | None = None
    rolled_back: bool = False
    writes: list[Write] = field(default_factory=list)
    locked: list[str] = field(default_factory=list)  # keys prewritten, in order
    held: int = 0  # locks still in the lock table


@dataclass(eq=False, slots=True)
class Lock:
    txn: Txn
    write: Write
    old_value: Row | None


@dataclass(eq=False)
class Region:
    id: int
    start: str
    end: str  # "" = unbounded
    parents: tuple[int, ...] = ()
    resolved: int = 0
    buffer: list[dict[str, Any]] = field(default_factory=list)
    locks: dict[int, int] = field(default_factory=dict)  # start_ts -> locks held here
    first_committed: set[int] = field(default_factory=set)
    retired: bool = False

    def contains(self, key: str) -> bool:
        return self.start <= key and (self.end == "" or key < self.end)


class Store:
    """Regions, locks and row versions, emitting each region's CDC events."""

    def __init__(
        self,
        clock: Clock,
        rng: random.Random,
        *,
        mode: WatermarkMode,
        boundaries: list[str],
        duplicate_rate: float,
    ) -> None:
        self.clock = clock
        self.rng = rng
        self.mode = mode
        self.duplicate_rate = duplicate_rate
        self.regions: dict[int, Region] = {}
        self.live: list[Region] = []
        self._starts: list[str] = []
        self.locks: dict[str, Lock] = {}
        self.versions: dict[str, list[tuple[int, int, Write, Row | None]]] = {}
        self.txns: dict[int, Txn] = {}  # start_ts -> txn holding locks
        self.events = 0
        self.resolving = False
        self.resolve_floor = 0  # the genesis commit ts, once known
        self._next_region = 1
        edges = ["", *boundaries, ""]
        for lo, hi in itertools.pairwise(edges):
            region = self._new_region(lo, hi, ())
            self._emit(region, {"region": region.id, "type": "INITIALIZED",
                                "start_key": lo, "end_key": hi})  # fmt: skip
        self._reindex()

    # -- plumbing ---------------------------------------------------------------

    def _new_region(self, start: str, end: str, parents: tuple[int, ...]) -> Region:
        region = Region(self._next_region, start, end, parents)
        self._next_region += 1
        self.regions[region.id] = region
        return region

    def _reindex(self) -> None:
        self.live = sorted(
            (r for r in self.regions.values() if not r.retired), key=lambda r: r.start
        )
        self._starts = [r.start for r in self.live]

    def region_of(self, key: str) -> Region:
        return self.live[bisect_right(self._starts, key) - 1]

    def _emit(self, region: Region, event: dict[str, Any]) -> None:
        region.buffer.append(event)
        self.events += 1
        if self.duplicate_rate and self.rng.random() < self.duplicate_rate:
            region.buffer.append(event)  # a retransmission: the same event twice in a row
            self.events += 1

    # -- reads --------------------------------------------------------------------

    def read_at(self, key: str, ts: int) -> Row | None:
        """The row committed at or below ``ts`` (a snapshot read)."""
        for commit_ts, _start, write, _old in reversed(self.versions.get(key, ())):
            if commit_ts <= ts:
                return write.value
        return None

    def latest(self, key: str) -> tuple[int, Row | None]:
        """The newest committed version of a key: (commit_ts, row); (0, None) if none."""
        versions = self.versions.get(key)
        if not versions:
            return 0, None
        commit_ts, _start, write, _old = versions[-1]
        return commit_ts, write.value

    # -- Percolator ---------------------------------------------------------------

    def prewrite(self, txn: Txn, write: Write, old_value: Row | None) -> None:
        """Place a lock on ``write.key`` and emit its PREWRITE in the owning region."""
        if txn.primary is None:
            txn.primary = write.key
        lock = Lock(txn, write, old_value)
        self.locks[write.key] = lock
        self.txns[txn.start_ts] = txn
        txn.locked.append(write.key)
        txn.writes.append(write)
        txn.held += 1
        region = self.region_of(write.key)
        region.locks[txn.start_ts] = region.locks.get(txn.start_ts, 0) + 1
        self._emit(region, self._prewrite_event(region, lock))

    def _prewrite_event(self, region: Region, lock: Lock) -> dict[str, Any]:
        w, txn = lock.write, lock.txn
        event: dict[str, Any] = {"region": region.id, "type": "PREWRITE", "start_ts": txn.start_ts,
                                 "table": w.table, "key": w.key, "op": w.op}  # fmt: skip
        if w.value is not None:
            event["value"] = w.value
        if lock.old_value is not None:
            event["old_value"] = lock.old_value
        event["primary"] = txn.primary
        if txn.large:
            event["large"] = True
        return event

    def _drop_lock(self, key: str) -> Lock:
        lock = self.locks.pop(key)
        lock.txn.held -= 1
        start_ts = lock.txn.start_ts
        region = self.region_of(key)
        left = region.locks[start_ts] - 1
        if left:
            region.locks[start_ts] = left
        else:
            del region.locks[start_ts]
        return lock

    def _forget_if_unlocked(self, txn: Txn) -> None:
        if txn.held == 0:
            self.txns.pop(txn.start_ts, None)

    def apply_commit(self, txn: Txn, commit_ts: int) -> None:
        """The primary committed: the transaction's rows become versions at ``commit_ts``."""
        txn.commit_ts = commit_ts
        for key in txn.locked:
            lock = self.locks[key]
            self.versions.setdefault(key, []).append(
                (commit_ts, txn.start_ts, lock.write, lock.old_value)
            )

    def commit_key(self, txn: Txn, key: str, *, silent: bool = False) -> None:
        """Emit the COMMIT of one key (or, ``silent``, clean the lock without an event).

        A key whose lock is already gone (a successor region's initial scan re-emitted
        the committed row) is skipped.
        """
        lock = self.locks.get(key)
        if lock is None or lock.txn is not txn:
            return
        region = self.region_of(key)
        first = txn.start_ts not in region.first_committed
        if silent and not first:
            self._drop_lock(key)
        else:
            self._drop_lock(key)
            region.first_committed.add(txn.start_ts)
            assert txn.commit_ts is not None
            self._emit(region, {"region": region.id, "type": "COMMIT", "start_ts": txn.start_ts,
                                "commit_ts": txn.commit_ts, "table": lock.write.table, "key": key})  # fmt: skip
        if txn.start_ts not in region.locks:
            region.first_committed.discard(txn.start_ts)
        self._forget_if_unlocked(txn)

    def rollback(self, txn: Txn) -> None:
        """Drop every lock of ``txn``, emitting ROLLBACK in the regions that hold them."""
        txn.rolled_back = True
        for key in txn.locked:
            lock = self.locks.get(key)
            if lock is None or lock.txn is not txn:
                continue
            region = self.region_of(key)
            self._drop_lock(key)
            self._emit(region, {"region": region.id, "type": "ROLLBACK", "start_ts": txn.start_ts,
                                "table": lock.write.table, "key": key})  # fmt: skip
        self.txns.pop(txn.start_ts, None)

    # -- resolver -----------------------------------------------------------------

    def resolve(self) -> None:
        """One resolver round: every live region reports its resolved ts if it moved."""
        if not self.resolving:
            return
        now = self.clock.tso()
        for region in self.live:
            bound = now
            for start_ts in region.locks:
                txn = self.txns[start_ts]
                if txn.large and self.mode == "min-commit-ts":
                    if start_ts in region.first_committed:
                        continue  # determined, and shown here by its first COMMIT
                    bound = min(bound, txn.min_commit_ts - 1)
                else:
                    bound = min(bound, start_ts)
            # Never below the genesis commit: a straggling genesis secondary would
            # otherwise let a region resolve at genesis's start ts, before the initial rows.
            if bound > region.resolved and bound >= self.resolve_floor:
                region.resolved = bound
                self._emit(region, {"region": region.id, "type": "RESOLVED", "ts": bound})

    def watermark(self) -> int:
        """The global watermark as the store knows it (every stream fully read)."""
        return min(r.resolved for r in self.live)

    # -- topology -----------------------------------------------------------------

    def split(self, region: Region) -> bool:
        """Split ``region`` at the median key it holds; False when it holds too few."""
        keys = sorted(k for k in self.versions if region.contains(k))
        if len(keys) < 2:
            return False
        mid = keys[len(keys) // 2]
        if mid == region.start:
            return False
        self._replace([region], [(region.start, mid), (mid, region.end)])
        return True

    def merge(self, left: Region, right: Region) -> None:
        """Merge two adjacent regions into one."""
        assert left.end == right.start
        self._replace([left, right], [(left.start, right.end)])

    def _replace(self, parents: list[Region], spans: list[tuple[str, str]]) -> None:
        floor = min(p.resolved for p in parents)
        for p in parents:
            self._emit(p, {"region": p.id, "type": "RETIRED"})
            p.retired = True
        lo = parents[0].start
        hi = parents[-1].end
        in_span = [k for k in sorted(self.locks) if lo <= k and (hi == "" or k < hi)]
        # Locks of committed transactions are resolved by the scan: their rows come out
        # as COMMITTED below, and their pending COMMITs are never sent.
        held: list[Lock] = []
        for key in in_span:
            lock = self.locks[key]
            if lock.txn.commit_ts is not None:
                self._drop_lock(key)
                self._forget_if_unlocked(lock.txn)
            else:
                held.append(self._drop_lock(key))
        version_keys = sorted(k for k in self.versions if lo <= k and (hi == "" or k < hi))
        pids = tuple(p.id for p in parents)
        children = [self._new_region(a, b, pids) for a, b in spans]
        self._reindex()
        for child in children:
            child.resolved = floor
            for key in version_keys:
                if not child.contains(key):
                    continue
                for commit_ts, start_ts, w, old in self.versions[key]:
                    if commit_ts > floor:
                        event: dict[str, Any] = {
                            "region": child.id, "type": "COMMITTED", "start_ts": start_ts,
                            "commit_ts": commit_ts, "table": w.table, "key": key, "op": w.op,
                        }  # fmt: skip
                        if w.value is not None:
                            event["value"] = w.value
                        if old is not None:
                            event["old_value"] = old
                        self._emit(child, event)
            for lock in held:
                if child.contains(lock.write.key):
                    self.locks[lock.write.key] = lock
                    lock.txn.held += 1
                    child.locks[lock.txn.start_ts] = child.locks.get(lock.txn.start_ts, 0) + 1
                    self._emit(child, self._prewrite_event(child, lock))
            self._emit(child, {"region": child.id, "type": "INITIALIZED", "start_key": child.start,
                               "end_key": child.end, "parents": list(pids)})  # fmt: skip
