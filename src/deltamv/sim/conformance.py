"""Check a change-log directory against every guarantee of CONTRACT.md section 2.

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
from pathlib import Path
from typing import Any

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
    """A change log breaks the contract; the message lists the first violations."""


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
    """Every contract violation in the change log (``[]`` when it conforms).

    ``tables`` (name -> DDL) enables value checks; by default the ``config.toml``
    next to the change log is used when there is one. ``complete`` says the upstream
    has finished writing (then a retired region must have successors and the live
    regions must partition the key space).
    """
    root = Path(changelog_dir)
    out: list[str] = []

    def bad(msg: str) -> None:
        if len(out) < MAX_VIOLATIONS:
            out.append(msg)

    schemas: dict[str, TableSchema] | None = None
    if tables is not None:
        schemas = {n: TableSchema.from_ddl(d) for n, d in tables.items()}
    elif (root.parent / "config.toml").exists():
        try:
            cfg = load_config(root.parent / "config.toml")
            schemas = {n: t.schema for n, t in cfg.tables.items()}
        except DeltaMVError as e:
            bad(f"config.toml next to the change log does not load: {e}")
    if truth is not None and not isinstance(truth, Truth):
        truth = Truth.load(truth)

    segments, problems = list_changelog(root)
    for p in problems:
        bad(f"layout: {p}")

    streams: dict[int, list[tuple[str, dict[str, Any]]]] = {}
    for rid, segs in segments.items():
        events: list[tuple[str, dict[str, Any]]] = []
        for seg in segs:
            try:
                lines = read_segment(seg.path)
            except Exception as e:  # unreadable Parquet file: report it, keep checking
                bad(f"{seg.path}: unreadable segment: {type(e).__name__}: {e}")
                continue
            for n, ev in enumerate(lines, start=1):
                where = f"{seg.path}:{n}"
                if isinstance(ev, str):
                    bad(f"{where}: {ev}")
                    continue
                problem = _field_problem(ev, rid, schemas)
                if problem:
                    bad(f"{where}: {problem}")
                    continue
                events.append((where, ev))
        streams[rid] = events

    # -- per region ---------------------------------------------------------------
    info: dict[int, dict[str, Any]] = {}
    # (key, start_ts) -> (op, value); start_ts -> commit_ts; rolled back start_ts
    row_values: dict[tuple[str, int], tuple[str, Any]] = {}
    commit_of: dict[int, int] = {}
    rolled: set[int] = set()
    for rid, events in streams.items():
        span: tuple[str, str] | None = None
        parents: tuple[int, ...] = ()
        retired = False
        resolved: int | None = None
        resolveds: list[tuple[int, int]] = []  # (position, ts)
        shown: dict[tuple[str, int], int] = {}  # version -> first position it is shown here
        pending: dict[int, list[str]] = {}
        ended: dict[int, str] = {}  # start_ts -> "commit"/"rollback"
        commit_here: dict[int, int] = {}
        prewritten: dict[int, set[str]] = {}
        keys_seen: list[tuple[str, str]] = []
        prev: dict[str, Any] | None = None
        for pos, (where, ev) in enumerate(events):
            if ev == prev:
                continue  # a retransmission
            prev = ev
            kind = ev["type"]
            if retired:
                bad(f"{where}: {kind} after RETIRED")
                continue
            if kind == "INITIALIZED":
                if span is not None:
                    bad(f"{where}: second INITIALIZED in region {rid}")
                span = (ev["start_key"], ev["end_key"])
                if span[1] != "" and span[1] <= span[0]:
                    bad(f"{where}: empty span {span}")
                parents = tuple(ev.get("parents") or ())
            elif kind == "RESOLVED":
                if span is None:
                    bad(f"{where}: RESOLVED before INITIALIZED")
                if resolved is not None and ev["ts"] < resolved:
                    bad(f"{where}: RESOLVED going backwards ({ev['ts']} < {resolved})")
                resolved = ev["ts"] if resolved is None else max(resolved, ev["ts"])
                resolveds.append((pos, ev["ts"]))
            elif kind == "RETIRED":
                retired = True
            else:
                key, s = ev["key"], ev["start_ts"]
                keys_seen.append((where, key))
                if kind in ("PREWRITE", "COMMITTED"):
                    value = ev.get("value") if ev["op"] == "PUT" else None
                    old = row_values.setdefault((key, s), (ev["op"], value))
                    if old != (ev["op"], value):
                        bad(f"{where}: row {key!r} of txn {s} differs from an earlier emission")
                if kind == "PREWRITE":
                    if s in ended:
                        bad(
                            f"{where}: PREWRITE of txn {s} after its {ended[s].upper()} in region {rid}"
                        )
                    if key in prewritten.setdefault(s, set()):
                        bad(f"{where}: txn {s} prewrites key {key!r} twice")
                    prewritten[s].add(key)
                    pending.setdefault(s, []).append(key)
                elif kind == "COMMITTED":
                    if ev["commit_ts"] <= s:
                        bad(f"{where}: commit_ts {ev['commit_ts']} <= start_ts {s}")
                    if span is not None:
                        bad(f"{where}: COMMITTED after INITIALIZED (only an initial scan emits it)")
                    if commit_of.setdefault(s, ev["commit_ts"]) != ev["commit_ts"]:
                        bad(f"{where}: txn {s} committed with two commit_ts")
                    shown.setdefault((key, s), pos)
                elif kind == "COMMIT":
                    c = ev["commit_ts"]
                    if c <= s:
                        bad(f"{where}: commit_ts {c} <= start_ts {s}")
                    if key not in prewritten.get(s, set()):
                        bad(
                            f"{where}: COMMIT of txn {s} key {key!r} without its PREWRITE in region {rid}"
                        )
                    if ended.get(s) == "rollback":
                        bad(f"{where}: COMMIT of txn {s} after its ROLLBACK")
                    if commit_here.setdefault(s, c) != c or commit_of.setdefault(s, c) != c:
                        bad(f"{where}: txn {s} committed with two commit_ts")
                    ended.setdefault(s, "commit")
                    for k in pending.pop(s, []):  # the first COMMIT shows the txn's rows here
                        shown.setdefault((k, s), pos)
                elif kind == "ROLLBACK":
                    if ended.get(s) == "commit":
                        bad(f"{where}: ROLLBACK of txn {s} after its COMMIT")
                    ended.setdefault(s, "rollback")
                    pending.pop(s, None)
                    rolled.add(s)
        if span is not None:
            for where, key in keys_seen:
                if not _in_span(key, *span):
                    bad(f"{where}: key {key!r} outside region {rid}'s span {span}")
        elif events and complete:
            bad(f"region {rid}: never INITIALIZED")
        info[rid] = {"span": span, "parents": parents, "retired": retired,
                     "resolveds": resolveds, "shown": shown}  # fmt: skip
    for s in sorted(rolled & set(commit_of)):
        bad(f"txn {s} both committed and rolled back")

    # -- lineage ------------------------------------------------------------------
    children: dict[int, list[int]] = {}
    for rid, i in info.items():
        for p in i["parents"]:
            children.setdefault(p, []).append(rid)
            if p not in info:
                bad(f"region {rid}: parent {p} has no stream")
            elif complete and not info[p]["retired"]:
                bad(f"region {rid}: parent {p} never RETIRED")
    initial = [i["span"] for i in info.values() if i["span"] is not None and not i["parents"]]
    if info and initial:
        problem = _partition_problem(initial)
        if problem:
            bad(f"initial regions do not partition the key space: {problem}")
    for parent, kids in sorted(children.items()):
        pspan = info[parent]["span"] if parent in info else None
        kid_spans = [info[k]["span"] for k in kids if info[k]["span"] is not None]
        if pspan is not None and complete and not _covers(kid_spans, *pspan):
            bad(f"region {parent}'s span {pspan} is not covered by its successors {sorted(kids)}")
    for rid, i in info.items():
        if i["span"] is None or not i["parents"]:
            continue
        pspans = [info[p]["span"] for p in i["parents"] if p in info and info[p]["span"]]
        if not _covers(pspans, *i["span"]):
            bad(f"region {rid}'s span {i['span']} is not inside its parents' spans")
    if complete:
        for rid, i in info.items():
            if i["retired"] and rid not in children:
                bad(f"region {rid} RETIRED without a successor")
        leaves = [
            i["span"] for rid, i in info.items() if i["span"] is not None and not i["retired"]
        ]
        if info and leaves:
            problem = _partition_problem(leaves)
            if problem:
                bad(f"live regions do not partition the key space: {problem}")

    # -- the RESOLVED promise -----------------------------------------------------
    versions: dict[tuple[str, int], int] = {}
    if isinstance(truth, Truth):
        for txn in truth.transactions:
            for row in txn.rows:
                versions[(row.key, txn.start_ts)] = txn.commit_ts
    for i in info.values():
        for key, s in i["shown"]:
            if s in commit_of:
                versions.setdefault((key, s), commit_of[s])
    by_key = sorted(versions)
    keys_sorted = [k for k, _ in by_key]
    ancestors_cache: dict[int, set[int]] = {}

    def ancestors(rid: int) -> set[int]:
        if rid not in ancestors_cache:
            ancestors_cache[rid] = set()
            acc: set[int] = set()
            for p in info.get(rid, {}).get("parents", ()):
                if p in info:
                    acc |= {p} | ancestors(p)
            ancestors_cache[rid] = acc
        return ancestors_cache[rid]

    for rid, i in sorted(info.items()):
        if i["span"] is None or not i["resolveds"]:
            continue
        start, end = i["span"]
        lo = bisect_left(keys_sorted, start)
        hi = len(keys_sorted) if end == "" else bisect_left(keys_sorted, end)
        mine = sorted((versions[v], v) for v in by_key[lo:hi])
        inherited: set[tuple[str, int]] = set()
        for a in sorted(ancestors(rid)):
            inherited.update(info[a]["shown"])
        at = 0  # resolved ts never decreases: each version is checked at the first
        for pos, ts in i["resolveds"]:  # RESOLVED that covers it
            while at < len(mine) and mine[at][0] <= ts:
                c, v = mine[at]
                at += 1
                first = i["shown"].get(v)
                if v not in inherited and (first is None or first > pos):
                    bad(
                        f"region {rid}: RESOLVED {ts} at event {pos + 1} but row {v[0]!r} of txn "
                        f"{v[1]} (commit_ts {c}) was not shown before it"
                    )
    return out


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
