"""Check a change-log directory against every rule of docs/changelog-format.md.

``check_changelog(dir)`` returns the violations found (empty when the log conforms).
It reads the log with its own plain code (no sharing with the production reader).
Checked: the layout; every event's fields and types; values against the tables'
schemas (from ``tables`` or a ``config.toml`` next to the change log); per region,
the stream order (prewrites before a transaction's first COMMIT/ROLLBACK there,
one ``commit_ts`` per transaction, nothing after ``RETIRED``, ``RESOLVED`` only after
``INITIALIZED`` and never backwards, keys inside the region's span); one row value
per ``(key, start_ts)``; lineage (initial regions and live regions partition the key
space, successors cover exactly what their parents served); and the ``RESOLVED``
promise itself: every row version committed at or below a region's resolved ts in
its span was shown before it (in the region or, complete, in its ancestors). With
``truth`` (a run folder or :class:`Truth`) the versions checked include every row
the upstream committed, so a row missing from the log is found too.
"""

from __future__ import annotations

import itertools
import os
from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from deltamv.config import load_config
from deltamv.errors import DeltaMVError
from deltamv.schema import INTEGER_RANGES, TableSchema
from deltamv.sim._io import list_changelog, read_segment
from deltamv.sim.truth import Truth

_TS_FIELDS = {
    "PREWRITE": ("start_ts",),
    "COMMIT": ("start_ts", "commit_ts"),
    "ROLLBACK": ("start_ts",),
    "COMMITTED": ("start_ts", "commit_ts"),
    "RESOLVED": ("ts",),
    "INITIALIZED": (),
    "RETIRED": (),
}
_ROW_TYPES = ("PREWRITE", "COMMIT", "ROLLBACK", "COMMITTED")
MAX_VIOLATIONS = 200


class ConformanceError(DeltaMVError):
    """A change log breaks the format's rules; the message lists the first violations."""


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _value_problem(row: Any, schema: TableSchema) -> str | None:
    if not isinstance(row, dict):
        return "value is not an object"
    for name in row:
        if schema.column(name) is None:
            return f"unknown column {name!r}"
    for col in schema.columns:
        v = row.get(col.name)
        if v is None:
            if not col.nullable:
                return f"column {col.name!r} is NOT NULL"
            continue
        kind = col.kind
        if kind in INTEGER_RANGES:
            lo, hi = INTEGER_RANGES[kind]
            if not _is_int(v) or not lo <= v <= hi:
                return f"column {col.name!r}: {v!r} is not a {kind.upper()}"
        elif kind in ("float", "double") and (
            not isinstance(v, (int, float)) or isinstance(v, bool)
        ):
            return f"column {col.name!r}: {v!r} is not a number"
        elif kind in ("string", "date", "timestamp", "binary") and not isinstance(v, str):
            return f"column {col.name!r}: {v!r} is not a string"
        elif kind == "boolean" and not isinstance(v, bool):
            return f"column {col.name!r}: {v!r} is not a boolean"
        elif kind == "decimal" and (isinstance(v, bool) or not isinstance(v, (int, float, str))):
            return f"column {col.name!r}: {v!r} is not a decimal"
    return None


def _in_span(key: str, start: str, end: str) -> bool:
    return start <= key and (end == "" or key < end)


def _partition_problem(spans: list[tuple[str, str]]) -> str | None:
    if not spans:
        return "no spans"
    spans = sorted(spans)
    if spans[0][0] != "":
        return f"key space below {spans[0][0]!r} is not covered"
    for (_a, b), (c, _d) in itertools.pairwise(spans):
        if b == "" or b != c:
            return f"spans overlap or leave a gap at {b!r}/{c!r}"
    if spans[-1][1] != "":
        return f"key space from {spans[-1][1]!r} is not covered"
    return None


def _covers(spans: list[tuple[str, str]], start: str, end: str) -> bool:
    """Whether the union of ``spans`` contains ``[start, end)``."""
    at = start
    for a, b in sorted(spans):
        if a > at:
            return False
        if b == "" or b > at:
            at = b
            if at == "":
                return True
        if end != "" and at != "" and at >= end:
            return True
    return at == "" or (end != "" and at >= end)


def check_changelog(
    changelog_dir: str | os.PathLike[str],
    *,
    tables: Mapping[str, str] | None = None,
    truth: Truth | str | os.PathLike[str] | None = None,
    complete: bool = True,
) -> list[str]:
    """Every violation of the change-log format in the log (``[]`` when it conforms).

    ``tables`` (name -> DDL) enables value checks; by default the ``config.toml``
    next to the change log is used when there is one. ``complete`` says the upstream
    has finished writing (then a retired region must have successors and the live
    regions must partition the key space).
    """
    root = Path(changelog_dir)
    out = _Violations()
    schemas = _schemas(root, tables, out)
    if truth is not None and not isinstance(truth, Truth):
        truth = Truth.load(truth)
    streams = _read_streams(root, schemas, out)
    txns = _Txns()
    regions = {rid: _check_region(rid, events, txns, out, complete=complete)
               for rid, events in streams.items()}  # fmt: skip
    for s in sorted(txns.rolled & set(txns.commit_of)):
        out.bad(f"txn {s} both committed and rolled back")
    _check_lineage(regions, out, complete=complete)
    _check_resolved(regions, txns, truth, out)
    return out.found


class _Violations:
    """The violations found, up to MAX_VIOLATIONS."""

    def __init__(self) -> None:
        self.found: list[str] = []

    def bad(self, msg: str) -> None:
        if len(self.found) < MAX_VIOLATIONS:
            self.found.append(msg)


Stream = list[tuple[str, dict[str, Any]]]  # (file:line, event) in a region's order


@dataclass
class _Txns:
    """What the regions' streams say about transactions, across regions."""

    row_values: dict[tuple[str, int], tuple[str, Any]] = field(default_factory=dict)
    commit_of: dict[int, int] = field(default_factory=dict)  # start_ts -> commit_ts
    rolled: set[int] = field(default_factory=set)  # rolled back somewhere


@dataclass
class _Region:
    """One region's stream as the checks after the per-region pass need it."""

    span: tuple[str, str] | None = None
    parents: tuple[int, ...] = ()
    retired: bool = False
    resolveds: list[tuple[int, int]] = field(default_factory=list)  # (position, ts)
    shown: dict[tuple[str, int], int] = field(default_factory=dict)  # version -> position


def _schemas(
    root: Path, tables: Mapping[str, str] | None, out: _Violations
) -> dict[str, TableSchema] | None:
    if tables is not None:
        return {n: TableSchema.from_ddl(d) for n, d in tables.items()}
    if (root.parent / "config.toml").exists():
        try:
            cfg = load_config(root.parent / "config.toml")
        except DeltaMVError as e:
            out.bad(f"config.toml next to the change log does not load: {e}")
            return None
        return {n: t.schema for n, t in cfg.tables.items()}
    return None


def _read_streams(
    root: Path, schemas: Mapping[str, TableSchema] | None, out: _Violations
) -> dict[int, Stream]:
    """Each region's well-formed events; the layout and every malformed event reported."""
    segments, problems = list_changelog(root)
    for p in problems:
        out.bad(f"layout: {p}")
    streams: dict[int, Stream] = {}
    for rid, segs in segments.items():
        events: Stream = []
        for seg in segs:
            try:
                lines = read_segment(seg.path)
            except (OSError, ValueError, pa.ArrowException) as e:
                out.bad(f"{seg.path}: unreadable segment: {type(e).__name__}: {e}")
                continue  # report it, keep checking the rest
            for n, ev in enumerate(lines, start=1):
                where = f"{seg.path}:{n}"
                if isinstance(ev, str):  # not a JSON object
                    out.bad(f"{where}: {ev}")
                elif problem := _field_problem(ev, rid, schemas):
                    out.bad(f"{where}: {problem}")
                else:
                    events.append((where, ev))
        streams[rid] = events
    return streams


class _RegionPass:
    """The checks of one region's stream, event by event, in its order."""

    def __init__(self, rid: int, txns: _Txns, out: _Violations) -> None:
        self.rid = rid
        self.txns = txns
        self.bad = out.bad
        self.region = _Region()
        self.pending: dict[int, list[str]] = {}
        self.ended: dict[int, str] = {}  # start_ts -> "commit"/"rollback"
        self.commit_here: dict[int, int] = {}
        self.prewritten: dict[int, set[str]] = {}
        self.keys_seen: list[tuple[str, str]] = []
        self.resolved: int | None = None  # the highest resolved ts so far

    def event(self, pos: int, where: str, ev: dict[str, Any]) -> None:
        region, kind = self.region, ev["type"]
        if region.retired:
            self.bad(f"{where}: {kind} after RETIRED")
        elif kind == "INITIALIZED":
            if region.span is not None:
                self.bad(f"{where}: second INITIALIZED in region {self.rid}")
            region.span = (ev["start_key"], ev["end_key"])
            if region.span[1] != "" and region.span[1] <= region.span[0]:
                self.bad(f"{where}: empty span {region.span}")
            region.parents = tuple(ev.get("parents") or ())
        elif kind == "RESOLVED":
            if region.span is None:
                self.bad(f"{where}: RESOLVED before INITIALIZED")
            if self.resolved is not None and ev["ts"] < self.resolved:
                self.bad(f"{where}: RESOLVED going backwards ({ev['ts']} < {self.resolved})")
            self.resolved = ev["ts"] if self.resolved is None else max(self.resolved, ev["ts"])
            region.resolveds.append((pos, ev["ts"]))
        elif kind == "RETIRED":
            region.retired = True
        else:
            self.row_event(pos, where, ev)

    def row_event(self, pos: int, where: str, ev: dict[str, Any]) -> None:
        kind, key, s = ev["type"], ev["key"], ev["start_ts"]
        self.keys_seen.append((where, key))
        if kind in ("PREWRITE", "COMMITTED"):
            value = ev.get("value") if ev["op"] == "PUT" else None
            old = self.txns.row_values.setdefault((key, s), (ev["op"], value))
            if old != (ev["op"], value):
                self.bad(f"{where}: row {key!r} of txn {s} differs from an earlier emission")
        if kind == "PREWRITE":
            self.prewrite(where, key, s)
        elif kind == "COMMITTED":
            self.committed(pos, where, key, s, ev["commit_ts"])
        elif kind == "COMMIT":
            self.commit(pos, where, key, s, ev["commit_ts"])
        elif kind == "ROLLBACK":
            if self.ended.get(s) == "commit":
                self.bad(f"{where}: ROLLBACK of txn {s} after its COMMIT")
            self.ended.setdefault(s, "rollback")
            self.pending.pop(s, None)
            self.txns.rolled.add(s)

    def prewrite(self, where: str, key: str, s: int) -> None:
        if s in self.ended:
            self.bad(
                f"{where}: PREWRITE of txn {s} after its {self.ended[s].upper()} in region {self.rid}"
            )
        if key in self.prewritten.setdefault(s, set()):
            self.bad(f"{where}: txn {s} prewrites key {key!r} twice")
        self.prewritten[s].add(key)
        self.pending.setdefault(s, []).append(key)

    def committed(self, pos: int, where: str, key: str, s: int, c: int) -> None:
        if c <= s:
            self.bad(f"{where}: commit_ts {c} <= start_ts {s}")
        if self.region.span is not None:
            self.bad(f"{where}: COMMITTED after INITIALIZED (only an initial scan emits it)")
        if self.txns.commit_of.setdefault(s, c) != c:
            self.bad(f"{where}: txn {s} committed with two commit_ts")
        self.region.shown.setdefault((key, s), pos)

    def commit(self, pos: int, where: str, key: str, s: int, c: int) -> None:
        if c <= s:
            self.bad(f"{where}: commit_ts {c} <= start_ts {s}")
        if not self.prewritten.get(s):  # (its key need not be one it prewrote here)
            self.bad(f"{where}: COMMIT of txn {s} without its PREWRITE in region {self.rid}")
        if self.ended.get(s) == "rollback":
            self.bad(f"{where}: COMMIT of txn {s} after its ROLLBACK")
        if self.commit_here.setdefault(s, c) != c or self.txns.commit_of.setdefault(s, c) != c:
            self.bad(f"{where}: txn {s} committed with two commit_ts")
        self.ended.setdefault(s, "commit")
        for k in self.pending.pop(s, []):  # the first COMMIT shows the txn's rows here
            self.region.shown.setdefault((k, s), pos)


def _check_region(
    rid: int, events: Stream, txns: _Txns, out: _Violations, *, complete: bool
) -> _Region:
    """The stream-order rules of one region (see the module doc)."""
    check = _RegionPass(rid, txns, out)
    prev: dict[str, Any] | None = None
    for pos, (where, ev) in enumerate(events):
        if ev == prev:
            continue  # a retransmission
        prev = ev
        check.event(pos, where, ev)
    span = check.region.span
    if span is not None:
        for where, key in check.keys_seen:
            if not _in_span(key, *span):
                out.bad(f"{where}: key {key!r} outside region {rid}'s span {span}")
    elif events and complete:
        out.bad(f"region {rid}: never INITIALIZED")
    return check.region


def _check_lineage(regions: Mapping[int, _Region], out: _Violations, *, complete: bool) -> None:
    """Parents and successors: the spans partition the key space at the start and (when
    complete) at the end, and successors cover exactly what their parents served."""
    children: dict[int, list[int]] = {}
    for rid, r in regions.items():
        for p in r.parents:
            children.setdefault(p, []).append(rid)
            if p not in regions:
                out.bad(f"region {rid}: parent {p} has no stream")
            elif complete and not regions[p].retired:
                out.bad(f"region {rid}: parent {p} never RETIRED")
    initial = [r.span for r in regions.values() if r.span is not None and not r.parents]
    _check_partition("initial", initial, out)
    for parent, kids in sorted(children.items()):
        pspan = regions[parent].span if parent in regions else None
        kid_spans = [span for k in kids if (span := regions[k].span) is not None]
        if pspan is not None and complete and not _covers(kid_spans, *pspan):
            out.bad(
                f"region {parent}'s span {pspan} is not covered by its successors {sorted(kids)}"
            )
    for rid, r in regions.items():
        if r.span is None or not r.parents:
            continue
        pspans = [span for p in r.parents if p in regions and (span := regions[p].span)]
        if not _covers(pspans, *r.span):
            out.bad(f"region {rid}'s span {r.span} is not inside its parents' spans")
    if complete:
        for rid, r in regions.items():
            if r.retired and rid not in children:
                out.bad(f"region {rid} RETIRED without a successor")
        leaves = [r.span for r in regions.values() if r.span is not None and not r.retired]
        _check_partition("live", leaves, out)


def _check_partition(which: str, spans: list[tuple[str, str]], out: _Violations) -> None:
    problem = _partition_problem(spans) if spans else None
    if problem:
        out.bad(f"{which} regions do not partition the key space: {problem}")


def _check_resolved(
    regions: Mapping[int, _Region], txns: _Txns, truth: Truth | None, out: _Violations
) -> None:
    """The RESOLVED promise: every row version in a region's span committed at or below
    a RESOLVED ts was shown before it, in the region or in its ancestors."""
    versions: dict[tuple[str, int], int] = {}
    if truth is not None:
        for txn in truth.transactions:
            for row in txn.rows:
                versions[(row.key, txn.start_ts)] = txn.commit_ts
    for r in regions.values():
        for key, s in r.shown:
            if s in txns.commit_of:
                versions.setdefault((key, s), txns.commit_of[s])
    by_key = sorted(versions)
    keys_sorted = [k for k, _ in by_key]
    ancestors = _Ancestors(regions)
    for rid, r in sorted(regions.items()):
        if r.span is None or not r.resolveds:
            continue
        start, end = r.span
        lo = bisect_left(keys_sorted, start)
        hi = len(keys_sorted) if end == "" else bisect_left(keys_sorted, end)
        mine = sorted((versions[v], v) for v in by_key[lo:hi])
        inherited: set[tuple[str, int]] = set()
        for a in sorted(ancestors.of(rid)):
            inherited.update(regions[a].shown)
        at = 0  # resolved ts never decreases: each version is checked at the first
        for pos, ts in r.resolveds:  # RESOLVED that covers it
            while at < len(mine) and mine[at][0] <= ts:
                c, v = mine[at]
                at += 1
                first = r.shown.get(v)
                if v not in inherited and (first is None or first > pos):
                    out.bad(
                        f"region {rid}: RESOLVED {ts} at event {pos + 1} but row {v[0]!r} of txn "
                        f"{v[1]} (commit_ts {c}) was not shown before it"
                    )


class _Ancestors:
    """A region's parents, their parents, and so on (those with a stream)."""

    def __init__(self, regions: Mapping[int, _Region]) -> None:
        self.regions = regions
        self.cache: dict[int, set[int]] = {}

    def of(self, rid: int) -> set[int]:
        if rid not in self.cache:
            self.cache[rid] = set()
            acc: set[int] = set()
            region = self.regions.get(rid)
            for p in region.parents if region is not None else ():
                if p in self.regions:
                    acc |= {p} | self.of(p)
            self.cache[rid] = acc
        return self.cache[rid]


def _field_problem(
    ev: dict[str, Any], rid: int, schemas: Mapping[str, TableSchema] | None
) -> str | None:
    kind = ev.get("type")
    if kind not in _TS_FIELDS:
        return f"unknown type {kind!r}"
    if ev.get("region") != rid or not _is_int(ev.get("region")):
        return f"field 'region' is {ev.get('region')!r}, the directory says {rid}"
    for f in _TS_FIELDS[kind]:
        if not _is_int(ev.get(f)) or ev[f] < 0:
            return f"{kind} needs integer field {f!r}"
    if kind in _ROW_TYPES:
        for f in ("table", "key"):
            if not isinstance(ev.get(f), str):
                return f"{kind} needs string field {f!r}"
        if kind in ("PREWRITE", "COMMITTED"):
            op = ev.get("op")
            if op not in ("PUT", "DELETE"):
                return f"unknown op {op!r}"
            if schemas is not None:
                schema = schemas.get(ev["table"])
                if schema is None:
                    return f"unknown table {ev['table']!r}"
                if op == "PUT":
                    if "value" not in ev:
                        return f"{kind} PUT without 'value'"
                    problem = _value_problem(ev["value"], schema)
                    if problem:
                        return f"value: {problem}"
                if ev.get("old_value") is not None:
                    problem = _value_problem(ev["old_value"], schema)
                    if problem:
                        return f"old_value: {problem}"
            elif op == "PUT" and not isinstance(ev.get("value"), dict):
                return f"{kind} PUT without an object 'value'"
            if kind == "PREWRITE":
                if "primary" in ev and not isinstance(ev["primary"], str):
                    return "field 'primary' must be a string"
                if "large" in ev and not isinstance(ev["large"], bool):
                    return "field 'large' must be a boolean"
    if kind == "INITIALIZED":
        for f in ("start_key", "end_key"):
            if not isinstance(ev.get(f), str):
                return f"INITIALIZED needs string field {f!r}"
        parents = ev.get("parents", [])
        if not isinstance(parents, list) or not all(_is_int(p) for p in parents):
            return "field 'parents' must be a list of integers"
    return None


def assert_conforms(changelog_dir: str | os.PathLike[str], **kwargs: Any) -> None:
    """Raise :class:`ConformanceError` listing the violations, if there are any."""
    problems = check_changelog(changelog_dir, **kwargs)
    if problems:
        shown = "\n  ".join(problems[:20])
        raise ConformanceError(
            f"{len(problems)} contract violation(s) in {changelog_dir}:\n  {shown}"
        )
