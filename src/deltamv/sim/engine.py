"""The simulation driver: transactions as coroutines over a simulated clock.

Each transaction is a generator that yields how many milliseconds it waits before
its next action (prewrite, heartbeat, commit, crash); the driver runs them in a
deterministic order from one seeded RNG. Outside ``live`` mode the clock is simulated
(one step per millisecond, no sleeping), so the same arguments give byte-identical
output.
"""

from __future__ import annotations

import functools
import heapq
import json
import math
import random
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from deltamv import tso
from deltamv.errors import DeltaMVError
from deltamv.sim import _output
from deltamv.sim.store import EPOCH_MS, Clock, Store, Txn, WatermarkMode
from deltamv.sim.truth import TRUTH_FORMAT, Truth, TruthRow, TruthTxn
from deltamv.sim.workloads import WORKLOAD_CLASSES, Abort, Workload, Write

WORKLOADS: tuple[str, ...] = tuple(sorted(WORKLOAD_CLASSES))
WATERMARK_MODES: tuple[str, ...] = ("start-ts", "min-commit-ts")
FORMATS: tuple[str, ...] = ("jsonl", "parquet", "mixed")
DEFAULT_TXNS = 2000

#: Keyword options and their defaults (the workload's own options are added on top).
OPTIONS: dict[str, Any] = {
    "large_every": 500,  # every Nth transaction is a large one (0: none)
    "large_size": 50,  # rows a large transaction writes
    "large_prewrite_ms": 200,  # how long its prewrite phase lasts
    "heartbeat_ms": 20,  # how often it pushes its min-commit-ts forward
    "duplicate_rate": 0.01,  # chance an event is delivered twice in a row
    "straggler_rate": 0.05,  # chance a secondary COMMIT lags behind
    "straggler_ms": 15,  # how far at most
    "orphan_rate": 0.005,  # chance a client crashes after prewriting
    "orphan_ttl_ms": 60,  # when its locks get rolled back
    "segment_events": 1000,  # events per segment file (live: also every flush_ms)
    "format": "jsonl",  # jsonl | parquet | mixed
    "rate": None,  # transactions per second (simulated: 1000; live: 200)
    "resolve_ms": None,  # resolver period (simulated: 5; live: 50)
    "flush_ms": 200,  # live: publish every region's events this often
    "late_rate": 0.1,  # live: chance a region's flush is held back one round
}


class SimulationError(DeltaMVError):
    """Bad simulator arguments or output folder; the message is one line."""


@dataclass(frozen=True)
class LargeTxnStats:
    """How one large transaction and the global watermark behaved."""

    start_ts: int
    commit_ts: int | None
    keys: int
    prewrite_ms: int  # length of the prewrite phase
    held_ms: int  # how long (from start) the global watermark stayed at or below start_ts
    max_lag_ms: int  # the worst watermark lag seen during the prewrite phase


@dataclass(frozen=True)
class SimulationResult:
    """What a run wrote: counts, the final global watermark and where the files are."""

    out: Path
    config_path: Path
    changelog: Path
    truth_dir: Path
    snapshot_ts: int | None
    events: int
    transactions: int  # committed, including the genesis transaction
    attempted: int
    aborted: int
    segments: int
    regions: int  # regions ever created
    final_watermark: int
    large_txns: tuple[LargeTxnStats, ...] = ()
    elapsed_s: float = 0.0

    def truth(self) -> Truth:
        """The run's ground truth."""
        return Truth.load(self.truth_dir)


def _check_args(
    workload: str,
    txns: int | None,
    duration: float | None,
    regions: int,
    splits: int,
    watermark_mode: str,
    snapshot_at: float | None,
    live: bool,
    options: dict[str, Any],
    wl_defaults: dict[str, Any],
) -> dict[str, Any]:
    def count(name: str, value: Any, minimum: int) -> None:
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise SimulationError(f"{name} must be an integer >= {minimum}, got {value!r}")

    def number(name: str, value: Any, lo: float, hi: float | None = None) -> None:
        ok = (
            isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        )
        if not ok or value < lo or (hi is not None and value > hi):
            where = f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"
            raise SimulationError(f"{name} must be a number {where}, got {value!r}")

    if workload not in WORKLOAD_CLASSES:
        raise SimulationError(f"unknown workload {workload!r} (choose from {', '.join(WORKLOADS)})")
    if txns is not None:
        count("txns", txns, 0)
    if duration is not None:
        number("duration", duration, 0)
    count("regions", regions, 1)
    count("splits", splits, 0)
    if watermark_mode not in WATERMARK_MODES:
        raise SimulationError(
            f"unknown watermark mode {watermark_mode!r} (choose from {', '.join(WATERMARK_MODES)})"
        )
    if snapshot_at is not None:
        number("snapshot_at", snapshot_at, 0, 1)
    known = {**OPTIONS, **wl_defaults}
    for name in options:
        if name not in known:
            raise SimulationError(f"unknown option {name!r} (valid: {', '.join(sorted(known))})")
    merged = {**known, **options}
    for name in ("large_every", "large_size", "large_prewrite_ms", "straggler_ms", "orphan_ttl_ms"):
        count(name, merged[name], 0)
    for name in ("heartbeat_ms", "segment_events", "flush_ms"):
        count(name, merged[name], 1)
    for name in ("duplicate_rate", "straggler_rate", "orphan_rate", "late_rate"):
        number(name, merged[name], 0, 1)
    for name in ("rate", "resolve_ms"):
        if merged[name] is not None:
            number(name, merged[name], 1e-9)
    for name, default in wl_defaults.items():
        if isinstance(default, int):
            count(name, merged[name], 1 if name == "accounts" else 0)
        else:
            number(name, merged[name], 0, 1)
    if merged["format"] not in FORMATS:
        raise SimulationError(
            f"unknown format {merged['format']!r} (choose from {', '.join(FORMATS)})"
        )
    return merged


def _prepare_out(out: Path, args: dict[str, Any]) -> None:
    if out.exists() and not out.is_dir():
        raise SimulationError(f"output {out} exists and is not a folder")
    if not out.exists():
        out.mkdir(parents=True)
        return
    meta_path = out / "truth" / "meta.json"
    if meta_path.exists():
        try:
            previous = json.loads(meta_path.read_text(encoding="utf-8")).get("args")
        except ValueError:
            previous = None
        if previous != args:
            raise SimulationError(
                f"output folder {out} already holds a different simulator run; choose another --out"
            )
        _output.clear_run(out)
        return
    if any(out.iterdir()):
        raise SimulationError(f"output folder {out} is not empty and holds no simulator run")


def simulate(
    workload: str,
    out: str | Path,
    *,
    seed: int = 0,
    txns: int | None = None,
    duration: float | None = None,
    regions: int = 4,
    splits: int = 0,
    watermark_mode: str = "start-ts",
    snapshot_at: float | None = None,
    live: bool = False,
    **workload_options: Any,
) -> SimulationResult:
    """Run one simulated upstream and write its change log, truth and job config.

    Writes ``out/changelog/`` and, with ``snapshot_at`` (a fraction of the committed
    transactions), ``out/snapshot/`` (docs/changelog-format.md), ``out/config.toml``
    (docs/config.md) and ``out/truth/`` (docs/truth-format.md). Without ``live`` the clock is
    simulated and the output is a pure function of the arguments. With ``live`` the
    TSO follows the wall clock and segments are published every ``flush_ms`` until
    ``duration`` seconds pass (or ``txns`` are run, or KeyboardInterrupt).

    Re-running into a folder holding the same run replaces it; a folder holding
    anything else raises :class:`SimulationError`.
    """
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise SimulationError(f"seed must be an integer, got {seed!r}")
    wl_class = WORKLOAD_CLASSES.get(workload)
    merged = _check_args(
        workload, txns, duration, regions, splits, watermark_mode, snapshot_at, live,
        workload_options, dict(wl_class.defaults) if wl_class else {},
    )  # fmt: skip
    assert wl_class is not None
    if txns is None and duration is None:
        txns = DEFAULT_TXNS if not live else None
    args = {
        "workload": workload, "seed": seed, "txns": txns, "duration": duration,
        "regions": regions, "splits": splits, "watermark_mode": watermark_mode,
        "snapshot_at": snapshot_at, "live": live, "options": dict(sorted(merged.items())),
    }  # fmt: skip
    out_path = Path(out)
    _prepare_out(out_path, args)
    engine = _Engine(wl_class, out_path, args, merged)
    return engine.run()


@dataclass
class _LargeTrack:
    txn: Txn
    began_ms: int
    keys: int
    prewrite_end_ms: int | None = None
    held_until_ms: int = 0
    max_lag_ms: int = 0


@dataclass(order=True)
class _Item:
    at: int
    seq: int
    action: Callable[[], None] = field(compare=False)


class _Engine:
    def __init__(
        self, wl_class: type[Workload], out: Path, args: dict[str, Any], opts: dict[str, Any]
    ) -> None:
        self.args = args
        self.opts = opts
        self.out = out
        self.live: bool = args["live"]
        self.rng = random.Random(args["seed"])
        self.mode: WatermarkMode = args["watermark_mode"]
        wl_opts = {k: v for k, v in opts.items() if k in wl_class.defaults or k == "large_size"}
        self.workload = wl_class(random.Random(args["seed"] * 31 + 1), wl_opts)
        self.clock = Clock(int(time.time() * 1000) if self.live else EPOCH_MS)
        self.rate: float = opts["rate"] or (200.0 if self.live else 1000.0)
        self.resolve_ms: float = opts["resolve_ms"] or (50 if self.live else 5)
        txns, duration = args["txns"], args["duration"]
        self.txn_limit: int | None = txns
        self.end_ms: int | None = None if duration is None else self.clock.ms + int(duration * 1000)
        expected = txns if txns is not None else int((duration or 10) * self.rate)
        boundaries = self._boundaries(args["regions"], expected)
        self.store = Store(
            self.clock, self.rng, mode=self.mode, boundaries=boundaries,
            duplicate_rate=float(opts["duplicate_rate"]),
        )  # fmt: skip
        self.writer = _output.SegmentWriter(out / "changelog", opts["format"], args["seed"])
        n_splits = args["splits"]
        self.topology_at = [expected * (i + 1) // (n_splits + 1) for i in range(n_splits)]
        self.topology_done = 0
        self.heap: list[_Item] = []
        self.seq = 0
        self.attempted = 0
        self.aborted = 0
        self.committed: list[TruthTxn] = []
        self.truth_lines: list[str] = []
        self.large: list[_LargeTrack] = []
        self.held: dict[int, int] = {}  # live: region -> rounds its flush was held back
        self._carry = 0.0
        self._next_resolve: float = self.clock.ms
        self._next_flush: int = self.clock.ms
        (out / "truth").mkdir(parents=True, exist_ok=True)
        self.truth_file = (out / "truth" / "transactions.jsonl").open("w", encoding="utf-8")
        self._write_meta(None, None)

    # -- setup ----------------------------------------------------------------------

    def _boundaries(self, n: int, expected: int) -> list[str]:
        candidates = sorted(set(self.workload.boundary_keys(expected)))
        picks = (
            sorted({candidates[len(candidates) * i // n] for i in range(1, n)})
            if candidates
            else []
        )
        picks = [p for p in picks if p]
        if len(picks) < n - 1:  # too few plausible keys: pad with synthetic ones
            picks = sorted(set(picks) | {f"~{i:04d}" for i in range(n - 1 - len(picks))})
        return picks

    def _write_meta(self, final_watermark: int | None, snapshot_ts: int | None) -> None:
        wl = self.workload
        meta = {
            "format": TRUTH_FORMAT,
            "workload": wl.name,
            "args": self.args,
            "tables": {
                n: {"schema": ddl, "primary_key": list(pk)} for n, (ddl, pk) in wl.tables.items()
            },
            "snapshot_ts": snapshot_ts,
            "final_watermark": final_watermark,
            "complete": final_watermark is not None,
            "transactions": len(self.committed),
            "attempted": self.attempted,
            "aborted": self.aborted,
            "events": self.store.events if hasattr(self, "store") else 0,
            "regions": len(self.store.regions) if hasattr(self, "store") else 0,
            "large_transactions": [asdict(s) for s in self._large_stats()],
        }
        _output.write_json(self.out / "truth" / "meta.json", meta)

    # -- scheduling -----------------------------------------------------------------

    def _at(self, delay_ms: int, action: Callable[[], None]) -> None:
        self.seq += 1
        heapq.heappush(self.heap, _Item(self.clock.ms + delay_ms, self.seq, action))

    def _spawn(self, gen: Iterator[int]) -> None:
        def advance() -> None:
            try:
                delay = next(gen)
            except StopIteration:
                return
            self._at(delay, advance)

        advance()

    # -- transactions ---------------------------------------------------------------

    def _commit(self, txn: Txn) -> None:
        store, rng = self.store, self.rng
        if not txn.locked:
            return
        store.apply_commit(txn, self.clock.tso())
        assert txn.commit_ts is not None
        rows = tuple(TruthRow(w.table, w.key, w.op, w.value) for w in txn.writes)
        self.committed.append(TruthTxn(txn.start_ts, txn.commit_ts, rows))
        line = {"start_ts": txn.start_ts, "commit_ts": txn.commit_ts,
                "rows": [{"table": r.table, "key": r.key, "op": r.op, "value": r.value} for r in rows]}  # fmt: skip
        self.truth_lines.append(_output.dumps(line))
        self.workload.on_commit(txn.writes)
        by_region: dict[int, list[str]] = {}
        for key in txn.locked:
            by_region.setdefault(store.region_of(key).id, []).append(key)
        assert txn.primary is not None
        primary_region = store.region_of(txn.primary).id
        store.commit_key(txn, txn.primary)  # the primary commits first: the txn is decided
        straggle, max_ms = (
            float(self.opts["straggler_rate"]),
            max(1, int(self.opts["straggler_ms"])),
        )
        never_ok = txn.large and self.mode == "min-commit-ts"
        for rid in [primary_region, *sorted(r for r in by_region if r != primary_region)]:
            keys = [k for k in by_region[rid] if k != txn.primary]
            first_delay = 0
            if rid != primary_region and rng.random() < straggle:
                first_delay = rng.randint(1, max_ms)
            for i, key in enumerate(keys):
                delay, silent = first_delay, False
                if (i > 0 or rid == primary_region) and rng.random() < straggle:
                    delay += rng.randint(1, max_ms)
                    silent = never_ok and rng.random() < 0.5  # this COMMIT is never sent
                if delay == 0:
                    store.commit_key(txn, key)
                else:
                    self._at(delay, functools.partial(store.commit_key, txn, key, silent=silent))

    def _small(self) -> Generator[int, None, None]:
        store, rng = self.store, self.rng
        txn = Txn(self.clock.tso(), "small")
        writes = self.workload.plan_small(lambda key: store.read_at(key, txn.start_ts))
        if not writes:
            return
        orphan = rng.random() < float(self.opts["orphan_rate"])
        yield rng.choice((0, 1, 1, 2))
        for w in writes:
            commit_ts, latest = store.latest(w.key)
            if w.key in store.locks or commit_ts > txn.start_ts:
                store.rollback(txn)  # write-write conflict: the later writer loses
                self.aborted += 1
                return
            store.prewrite(txn, w, latest)
        if orphan:  # the client crashed; its locks are resolved once their TTL expires
            yield int(self.opts["orphan_ttl_ms"])
            store.rollback(txn)
            self.aborted += 1
            return
        yield rng.choice((0, 1, 2))
        self._commit(txn)

    def _large(self) -> Generator[int, None, None]:
        store = self.store
        plan = self.workload.plan_large()
        if plan is None or not plan.keys:
            return
        txn = Txn(self.clock.tso(), "large", large=True)
        txn.min_commit_ts = txn.start_ts + 1
        track = _LargeTrack(txn, self.clock.ms, len(plan.keys))
        self.large.append(track)
        began, span = self.clock.ms, int(self.opts["large_prewrite_ms"])
        heartbeat = int(self.opts["heartbeat_ms"])
        next_heartbeat = began + heartbeat
        i = 0
        try:
            while i < len(plan.keys):
                if self.clock.ms >= next_heartbeat:  # pushes min-commit-ts (and the TTL)
                    txn.min_commit_ts = self.clock.tso()
                    next_heartbeat = self.clock.ms + heartbeat
                key = plan.keys[i]
                if key in store.locks:
                    yield 1  # pessimistic: wait for the holder
                    continue
                _commit_ts, latest = store.latest(key)
                write = plan.step(i, key, latest)
                if write is not None:
                    store.prewrite(txn, write, latest)
                i += 1
                due = began + span * i // len(plan.keys)
                yield max(0, min(due, next_heartbeat) - self.clock.ms)
        except Abort:
            store.rollback(txn)
            self.aborted += 1
            plan.done()
            track.prewrite_end_ms = self.clock.ms
            return
        track.prewrite_end_ms = self.clock.ms
        self._commit(txn)
        plan.done()

    def _start_txn(self) -> None:
        every = int(self.opts["large_every"])
        self.attempted += 1
        if every and self.attempted % every == 0 and int(self.opts["large_size"]) > 0:
            self._spawn(self._large())
        else:
            self._spawn(self._small())
        while (
            self.topology_done < len(self.topology_at)
            and self.attempted >= self.topology_at[self.topology_done]
        ):
            self._change_topology(self.topology_done)
            self.topology_done += 1

    def _change_topology(self, index: int) -> None:
        store = self.store
        if index % 3 == 2 and len(store.live) >= 2:
            i = self.rng.randrange(len(store.live) - 1)
            left, right = store.live[i], store.live[i + 1]
            store.merge(left, right)
            retired = [left, right]
        else:
            order = list(store.live)
            self.rng.shuffle(order)
            retired = []
            for region in order:
                if store.split(region):
                    retired = [region]
                    break
        for region in retired:  # a retired region's stream is complete: publish it
            self.writer.publish(region.id, region.buffer)
            region.buffer = []

    # -- the loop -------------------------------------------------------------------

    def _genesis(self) -> None:
        txn = Txn(self.clock.tso(), "genesis")
        for w in self.workload.genesis():
            store_latest = self.store.latest(w.key)[1]
            self.store.prewrite(txn, w, store_latest)
        self.clock.advance_to(self.clock.ms + 1)
        self._commit(txn)
        # No region reports a resolved ts before the genesis transaction committed, so
        # every watermark above 0 sees the initial rows.
        self.store.resolving = True
        self.store.resolve_floor = txn.commit_ts or 0
        self.store.resolve()

    def _run_due(self) -> None:
        while self.heap and self.heap[0].at <= self.clock.ms:
            heapq.heappop(self.heap).action()

    def _observe(self) -> None:
        wm = self.store.watermark()
        lag = self.clock.ms - tso.physical_ms(wm)
        for track in self.large:
            if track.txn.commit_ts is not None or track.txn.rolled_back:
                continue
            if wm <= track.txn.start_ts:
                track.held_until_ms = self.clock.ms
            if track.prewrite_end_ms is None:
                track.max_lag_ms = max(track.max_lag_ms, lag)

    def _large_stats(self) -> list[LargeTxnStats]:
        return [
            LargeTxnStats(
                t.txn.start_ts,
                t.txn.commit_ts,
                t.keys,
                (t.prewrite_end_ms or t.began_ms) - t.began_ms,
                max(0, t.held_until_ms - t.began_ms),
                t.max_lag_ms,
            )
            for t in self.large
        ]

    def _flush(self, *, everything: bool) -> None:
        limit = int(self.opts["segment_events"])
        late = float(self.opts["late_rate"]) if self.live else 0.0
        for region in list(self.store.regions.values()):
            buf = region.buffer
            if not buf:
                continue
            if everything or len(buf) >= limit:
                if (
                    not everything
                    or not late
                    or self.rng.random() >= late
                    or self.held.get(region.id, 0) >= 3
                ):
                    self.held[region.id] = 0
                    for i in range(0, len(buf), limit):
                        self.writer.publish(region.id, buf[i : i + limit])
                    region.buffer = []
                else:  # published late: this region's stream falls behind the others
                    self.held[region.id] = self.held.get(region.id, 0) + 1
        if self.truth_lines:
            self.truth_file.write("\n".join(self.truth_lines) + "\n")
            self.truth_lines = []
            if self.live:
                self.truth_file.flush()

    def _arrivals_open(self) -> bool:
        if self.txn_limit is not None and self.attempted >= self.txn_limit:
            return False
        return self.end_ms is None or self.clock.ms < self.end_ms

    def _step(self, arrivals: bool, dt_ms: int) -> None:
        if arrivals:
            self._carry += self.rate * dt_ms / 1000 * self.rng.uniform(0.5, 1.5)
            while self._carry >= 1 and self._arrivals_open():
                self._carry -= 1
                self._start_txn()
        self._run_due()
        if self.clock.ms >= self._next_resolve:
            self.store.resolve()
            self._observe()
            self._next_resolve = self.clock.ms + self.resolve_ms
        if self.live:
            if self.clock.ms >= self._next_flush:
                self._flush(everything=True)
                self._next_flush = self.clock.ms + int(self.opts["flush_ms"])
        else:
            self._flush(everything=False)

    def run(self) -> SimulationResult:
        began = time.perf_counter()
        self._carry = 0.0
        self._next_resolve = self.clock.ms
        self._next_flush = self.clock.ms
        self._genesis()
        try:
            if self.live:
                self._run_live()
            else:
                while self._arrivals_open():
                    self.clock.advance_to(self.clock.ms + 1)
                    self._step(True, 1)
        except KeyboardInterrupt:
            pass
        # Drain: no new transactions; running ones finish, stragglers arrive, orphans expire.
        while self.heap:
            self._advance(max(self.clock.ms + 1, self.heap[0].at))
            self._step(False, 0)
        self.clock.advance_to(self.clock.ms + 1)
        self.store.resolve()
        self._observe()
        final = self.store.watermark()
        self._flush(everything=True)
        self.live = False
        self._flush(everything=True)
        self.truth_file.close()
        snapshot_ts = self._snapshot()
        config = _output.write_config(
            self.out, type(self.workload), snapshot=snapshot_ts is not None
        )
        self._write_meta(final, snapshot_ts)
        return SimulationResult(
            out=self.out, config_path=config, changelog=self.out / "changelog",
            truth_dir=self.out / "truth", snapshot_ts=snapshot_ts, events=self.store.events,
            transactions=len(self.committed), attempted=self.attempted, aborted=self.aborted,
            segments=self.writer.segments, regions=len(self.store.regions), final_watermark=final,
            large_txns=tuple(self._large_stats()), elapsed_s=time.perf_counter() - began,
        )  # fmt: skip

    def _advance(self, target_ms: int) -> None:
        if self.live:
            while int(time.time() * 1000) < target_ms:
                time.sleep(0.001)
            self.clock.advance_to(max(target_ms, int(time.time() * 1000)))
        else:
            self.clock.advance_to(target_ms)

    def _run_live(self) -> None:
        last = self.clock.ms
        while self._arrivals_open():
            time.sleep(0.002)
            now = int(time.time() * 1000)
            if now <= last:
                continue
            self.clock.advance_to(now)
            self._step(True, now - last)
            last = now

    def _snapshot(self) -> int | None:
        fraction = self.args["snapshot_at"]
        if fraction is None or not self.committed:
            return None
        commits = sorted(t.commit_ts for t in self.committed)
        ts = commits[round(fraction * (len(commits) - 1))]
        truth = Truth(self.committed, self.workload.tables)
        _output.write_snapshot(self.out / "snapshot", ts, truth.tables_at(ts))
        return ts


def large_txn_summary(result: SimulationResult) -> dict[str, float]:
    """Averages over a run's large transactions (for reports and benchmarks)."""
    stats = [s for s in result.large_txns if s.commit_ts is not None]
    if not stats:
        return {"large_txns": 0}
    return {
        "large_txns": len(stats),
        "prewrite_ms": sum(s.prewrite_ms for s in stats) / len(stats),
        "held_ms": sum(s.held_ms for s in stats) / len(stats),
        "max_lag_ms": max(s.max_lag_ms for s in stats),
    }


__all__ = ["WORKLOADS", "LargeTxnStats", "SimulationError", "SimulationResult", "Write", "simulate"]
