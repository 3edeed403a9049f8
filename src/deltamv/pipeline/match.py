"""The matcher: a batch of region streams in, committed rows out, columnar.

Transaction-level, per region, as the large-transaction watermark RFC requires: the
*first* ``COMMIT`` of a transaction in a region commits all of its prewritten rows in
that region. In ``min-commit-ts`` mode a region's resolved ts may pass a large
transaction right after that first commit, while the COMMITs of its other keys straggle
in later or never; matching key by key would leave those rows pending below the
watermark and lose them.

The whole batch is matched at once, without a Python step per event: each transaction's
fate in a region (committed, rolled back, still open) is decided by grouping its events,
and every rule that needs history (a COMMIT without its PREWRITE, a PREWRITE after the
transaction finished, a RESOLVED going backwards, events after RETIRED) is checked for
all events together; the first violation in stream order is raised as a
:class:`BadRecordError` with its file and line. Only the few region events (INITIALIZED,
RESOLVED, RETIRED) are walked one by one. The caller runs the batch inside one state
transaction, so a bad record leaves nothing behind.

What the matcher keeps between batches (in the state): the prewritten rows of open
transactions (:class:`~deltamv.state.chunks.PendingTxns`), the transactions finished
per region (:class:`~deltamv.state.chunks.DoneTxns`, to recognise stragglers), and the
region states the frontier reads.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltamv.changelog import events as ev
from deltamv.changelog.batch import OLD_PREFIX
from deltamv.compute import Compute
from deltamv.errors import BadRecordError
from deltamv.pipeline.frontier import RegionState
from deltamv.schema import change_column
from deltamv.state.chunks import DoneTxns, PendingTxns

__all__ = ["Matched", "match"]

_TXN_TYPES = (ev.PREWRITE, ev.COMMIT, ev.ROLLBACK)
_ROW_TYPES = (*_TXN_TYPES, ev.COMMITTED)
_REGION_TYPES = (ev.INITIALIZED, ev.RESOLVED, ev.RETIRED)


@dataclass(frozen=True)
class Matched:
    """What one batch of events committed (rows above ``floor``), per table.

    Each table's rows: ``key, start_ts, commit_ts, op`` then the table's columns and the
    ``__old_<pk>`` columns, as the change log gave them.
    """

    events: int
    committed: Mapping[str, pa.Table]
    regions: Mapping[int, RegionState]
    # The transactions that finished here (region, start_ts, commit_ts: NULL for a
    # rollback), except in regions that retired: for the caller to add to ``done``.
    finished: pa.Table


@dataclass
class _Violation:
    ev: int
    reason: str


def match(
    compute: Compute,
    files: Sequence[str],
    events: pa.Table,
    values: Mapping[str, pa.Table],
    *,
    regions: Mapping[int, RegionState],
    pending: PendingTxns,
    done: DoneTxns,
    floor: int,
) -> Matched:
    """Match one batch of events against the state (see the module doc).

    ``floor`` is the watermark already applied: a committed row at or below it has
    already been output (or is in the snapshot), so it is a re-emission and dropped.
    Updates ``pending`` (and ``done`` for retired regions); returns the committed rows,
    the regions after the batch and the transactions finished, which the caller adds to
    ``done``. Raises BadRecordError for the first event that breaks the contract.
    """
    n = events.num_rows
    ev_index = pa.array(np.arange(n, dtype=np.int64))
    events = events.append_column("ev", ev_index)
    kinds = events.column("type")

    region_events = events.select(list(_REGION_COLUMNS)).filter(
        pc.is_in(kinds, pa.array(_REGION_TYPES))
    )  # only the columns it needs are copied
    new_regions, retired_at, first_bad = _walk_regions(region_events, regions)

    row_events = events.select(
        ["ev", "region", "type", "start_ts", "commit_ts", "table", "key"]
    ).filter(pc.is_in(kinds, pa.array(_ROW_TYPES)))  # only the columns it needs are copied
    violations: list[_Violation] = [] if first_bad is None else [first_bad]
    violations += _after_retired(compute, row_events, retired_at)

    txn_events = row_events.filter(pc.is_in(row_events.column("type"), pa.array(_TXN_TYPES)))
    txns = txn_events.select(["region", "start_ts"]).group_by(["region", "start_ts"]).aggregate([])
    prior = done.lookup(txns)
    fates = _fates(txn_events, prior)
    violations += _txn_violations(compute, txn_events, prior, fates, pending, floor)
    if violations:
        worst = min(violations, key=lambda v: v.ev)
        raise _bad(files, events, worst)

    try:
        committed = _apply_fates(
            compute, events, values, fates, new_regions, retired_at, pending=pending, floor=floor
        )
    except _Rewritten as exc:  # (the batch's state transaction is rolled back)
        raise _bad(files, events, exc.violation) from None
    finished = fates.filter(pc.is_valid(fates.column("ftype"))).select(
        ["region", "start_ts", "fcommit"]
    )
    commit_ts = pc.if_else(
        pc.equal(fates.filter(pc.is_valid(fates.column("ftype"))).column("ftype"), ev.COMMIT),
        finished.column("fcommit"),
        pa.scalar(None, pa.int64()),
    )
    finished = pa.table({"region": finished.column("region"),
                         "start_ts": finished.column("start_ts"), "commit_ts": commit_ts})  # fmt: skip
    for region in retired_at:
        # Unresolved locks of a retired region are re-emitted by its successors.
        pending.drop_region(region)
        done.drop_region(region)
    if retired_at:
        gone = pa.array(list(retired_at), pa.int64())
        finished = finished.filter(pc.invert(pc.is_in(finished.column("region"), gone)))
    return Matched(n, committed, new_regions, finished)


# -- region events ------------------------------------------------------------------------
_REGION_COLUMNS = ("ev", "region", "type", "ts", "start_key", "end_key", "parents")


def _walk_regions(
    region_events: pa.Table, regions: Mapping[int, RegionState]
) -> tuple[dict[int, RegionState], dict[int, int], _Violation | None]:
    """Apply INITIALIZED, RESOLVED and RETIRED in stream order.

    Returns the regions after the batch, the position of each region's RETIRED (-1 for
    one retired before the batch) and the first violation, if any.
    """
    # Mutable per-region fields while walking: [start_key, end_key, parents, resolved, retired]
    fields: dict[int, list[Any]] = {
        r: [s.start_key, s.end_key, s.parents, s.resolved, s.retired] for r, s in regions.items()
    }
    retired_at = {r: -1 for r, s in regions.items() if s.retired}
    found: _Violation | None = None
    cols = [region_events.column(c).to_pylist() for c in _REGION_COLUMNS]
    for position, region, kind, ts, start_key, end_key, parents in zip(*cols, strict=True):
        state = fields.get(region)
        if state is None:
            state = fields[region] = [None, None, (), None, False]
        if state[4]:
            if kind == ev.RETIRED:
                continue  # a retransmitted RETIRED (events may arrive twice in a row)
            found = _Violation(position, f"{kind} event after the region's RETIRED")
            break
        if kind == ev.RESOLVED:
            if state[0] is None:
                found = _Violation(position, f"RESOLVED {ts} before the region's INITIALIZED")
                break
            if state[3] is not None and ts < state[3]:
                found = _Violation(position, f"RESOLVED going backwards: {ts} after {state[3]}")
                break
            state[3] = ts
        elif kind == ev.INITIALIZED:
            lineage = tuple(sorted(int(p) for p in (parents or [])))
            if state[0] is not None and (state[0], state[1], state[2]) != (
                start_key, end_key, lineage,
            ):  # fmt: skip
                found = _Violation(position, "INITIALIZED again with a different span or parents")
                break
            state[0], state[1], state[2] = start_key, end_key, lineage
        else:  # RETIRED
            state[4] = True
            retired_at[region] = position
    states = {
        r: RegionState(r, f[0], f[1], tuple(f[2]), f[3], bool(f[4])) for r, f in fields.items()
    }
    return states, retired_at, found


def _after_retired(
    compute: Compute, row_events: pa.Table, retired_at: Mapping[int, int]
) -> list[_Violation]:
    if not retired_at or row_events.num_rows == 0:
        return []
    marks = pa.table({"region": list(retired_at), "rpos": list(retired_at.values())},
                     schema=pa.schema([("region", pa.int64()), ("rpos", pa.int64())]))  # fmt: skip
    found = compute.query(
        "SELECT e.ev, e.type FROM e JOIN r USING (region) WHERE e.ev > r.rpos"
        " ORDER BY e.ev LIMIT 1",
        e=row_events,
        r=marks,
    )
    if found.num_rows == 0:
        return []
    position, kind = found.column("ev")[0].as_py(), found.column("type")[0].as_py()
    return [_Violation(position, f"{kind} event after the region's RETIRED")]


# -- transactions -------------------------------------------------------------------------
_TXN = ["region", "start_ts"]
_FIRST = pc.ScalarAggregateOptions(skip_nulls=False)


def _fates(txn_events: pa.Table, prior: pa.Table) -> pa.Table:
    """Per (region, start_ts) seen in the batch: its PREWRITEs here (``prewrites``), its
    first COMMIT or ROLLBACK here (``fev``, ``ftype``, ``fcommit``; none if it finished
    before the batch), how it finished before the batch (``prior``, ``prior_commit``:
    NULL for a rollback), and whether its events may break a rule of
    ``_TXN_RULES_SQL`` (``may_break``: it finished before the batch, or has a PREWRITE
    after its first finish here, a ROLLBACK after a first COMMIT, a COMMIT after a first
    ROLLBACK, or COMMITs at two commit ts; one COMMIT or ROLLBACK per key, or one sent
    again, breaks none). In Arrow: on a batch's few
    thousand transactions a DuckDB query of the same costs about three times as much."""
    kinds = txn_events.column("type")
    no_ev = pa.scalar(None, pa.int64())

    def where(kind: str, column: str) -> pa.ChunkedArray:  # the column, NULL but on ``kind``
        return pc.if_else(pc.equal(kinds, kind), txn_events.column(column), no_ev)

    per_event = pa.table({
        **{c: txn_events.column(c) for c in _TXN},
        "pw": pc.cast(pc.equal(kinds, ev.PREWRITE), pa.int64()),
        "pw_ev": where(ev.PREWRITE, "ev"), "rb_ev": where(ev.ROLLBACK, "ev"),
        "cm_ev": where(ev.COMMIT, "ev"), "cm_ts": where(ev.COMMIT, "commit_ts"),
    })  # fmt: skip
    aggregates = [("pw", "sum"), ("pw_ev", "max"), ("rb_ev", "max"), ("cm_ev", "max"),
                  ("cm_ts", "min"), ("cm_ts", "max")]  # fmt: skip
    txns = (
        per_event.group_by(_TXN, use_threads=False)
        .aggregate(aggregates)
        .rename_columns([*_TXN, "prewrites", "last_pw", "last_rb", "last_cm", "min_ts", "max_ts"])
    )
    # The events are in their order (``ev``): a transaction's first is its earliest.
    finishing = txn_events.filter(pc.is_in(kinds, pa.array([ev.COMMIT, ev.ROLLBACK])))
    fin = (
        finishing.select([*_TXN, "ev", "type", "commit_ts"])
        .group_by(_TXN, use_threads=False)
        .aggregate([(c, "first", _FIRST) for c in ("ev", "type", "commit_ts")])
        .rename_columns([*_TXN, "fev", "ftype", "fcommit"])
    )
    before = prior.select([*_TXN, "commit_ts"]).rename_columns([*_TXN, "prior_commit"])
    before = before.append_column("_prior", pa.array([True] * before.num_rows, pa.bool_()))
    fates = txns.join(fin, _TXN, join_type="left outer").join(before, _TXN, join_type="left outer")
    earlier = pc.is_valid(fates.column("_prior"))
    fev = fates.column("fev")

    def after(column: str) -> pa.ChunkedArray:
        return pc.fill_null(pc.greater(fates.column(column), fev), False)

    def first_is(kind: str) -> pa.ChunkedArray:
        return pc.fill_null(pc.equal(fates.column("ftype"), kind), False)

    two_ts = pc.fill_null(pc.not_equal(fates.column("min_ts"), fates.column("max_ts")), False)
    may_break = functools.reduce(pc.or_, [
        earlier, after("last_pw"), pc.and_(first_is(ev.COMMIT), after("last_rb")),
        pc.and_(first_is(ev.ROLLBACK), after("last_cm")), two_ts,
    ])  # fmt: skip
    fates = fates.append_column("prior", earlier).append_column("may_break", may_break)
    for name in ("fev", "ftype", "fcommit"):  # finished before: not again here
        column = fates.column(name)
        fates = fates.set_column(
            fates.schema.get_field_index(name),
            name,
            pc.if_else(earlier, pa.scalar(None, column.type), column),
        )
    return fates.select(
        [*_TXN, "prewrites", "fev", "ftype", "fcommit", "prior", "prior_commit", "may_break"]
    )


# Every rule about a transaction's events in a region, each violation with its position.
_TXN_RULES_SQL = """
SELECT e.ev,
  CASE
    WHEN e.type = 'PREWRITE' THEN
      'PREWRITE of transaction ' || e.start_ts || ' after its COMMIT or ROLLBACK in this region'
    WHEN e.type = 'COMMIT' AND ((f.prior AND f.prior_commit IS NULL) OR f.ftype = 'ROLLBACK') THEN
      'COMMIT of transaction ' || e.start_ts || ' after its ROLLBACK in this region'
    WHEN e.type = 'COMMIT' THEN
      'COMMIT of transaction ' || e.start_ts || ' at ' || e.commit_ts || ', first committed at '
      || coalesce(f.prior_commit, f.fcommit)
    ELSE 'ROLLBACK of transaction ' || e.start_ts || ' after its COMMIT in this region'
  END AS reason
FROM e JOIN f USING (region, start_ts)
WHERE (e.type = 'PREWRITE' AND (f.prior OR e.ev > f.fev))
   OR (e.type = 'COMMIT' AND f.prior AND f.prior_commit IS NULL)
   OR (e.type = 'COMMIT' AND f.prior AND f.prior_commit <> e.commit_ts)
   OR (e.type = 'COMMIT' AND e.ev > f.fev AND f.ftype = 'ROLLBACK')
   OR (e.type = 'COMMIT' AND e.ev > f.fev AND f.ftype = 'COMMIT' AND f.fcommit <> e.commit_ts)
   OR (e.type = 'ROLLBACK' AND f.prior AND f.prior_commit IS NOT NULL)
   OR (e.type = 'ROLLBACK' AND e.ev > f.fev AND f.ftype = 'COMMIT')
ORDER BY e.ev LIMIT 1
"""


def _txn_violations(
    compute: Compute,
    txn_events: pa.Table,
    prior: pa.Table,
    fates: pa.Table,
    pending: PendingTxns,
    floor: int,
) -> list[_Violation]:
    found: list[_Violation] = []
    # only the transactions that may break a rule are looked at (see _fates), usually none
    suspects = fates.filter(fates.column("may_break"))
    if suspects.num_rows:
        rules = compute.query(_TXN_RULES_SQL, e=txn_events, f=suspects)
        if rules.num_rows:
            found.append(
                _Violation(rules.column("ev")[0].as_py(), rules.column("reason")[0].as_py())
            )
    # A first COMMIT above the floor must commit something: rows prewritten in this batch
    # or left pending by an earlier one.
    bare = fates.filter(
        pc.and_(
            pc.and_(
                pc.equal(fates.column("ftype"), ev.COMMIT), pc.equal(fates.column("prewrites"), 0)
            ),
            pc.greater(fates.column("fcommit"), floor),
        )
    )
    if bare.num_rows:
        known = pending.known(bare.select(["region", "start_ts"]))
        missing = bare.join(known, ["region", "start_ts"], join_type="left anti")
        if missing.num_rows:
            first = missing.sort_by("fev").slice(0, 1).to_pylist()[0]
            found.append(
                _Violation(
                    first["fev"],
                    f"COMMIT of transaction {first['start_ts']} without its PREWRITE"
                    f" in region {first['region']}",
                )
            )
    return found


def _apply_fates(
    compute: Compute,
    events: pa.Table,
    values: Mapping[str, pa.Table],
    fates: pa.Table,
    regions: Mapping[int, RegionState],
    retired_at: Mapping[int, int],
    *,
    pending: PendingTxns,
    floor: int,
) -> dict[str, pa.Table]:
    """Move the rows of transactions committed here to the output, keep the open ones
    pending, drop the rolled-back ones; add the self-contained COMMITTED rows."""
    ftype = fates.column("ftype")
    committed_txns = fates.filter(pc.equal(ftype, ev.COMMIT)).select(
        ["region", "start_ts", "fcommit"]
    )
    rolled_back = fates.filter(pc.equal(ftype, ev.ROLLBACK)).select(["region", "start_ts"])
    open_txns = fates.filter(pc.and_(pc.is_null(ftype), pc.invert(fates.column("prior")))).select(
        ["region", "start_ts"]
    )
    if retired_at:  # rows still open when their region retires are dropped (re-emitted)
        gone = pa.array(list(retired_at), pa.int64())
        open_txns = open_txns.filter(pc.invert(pc.is_in(open_txns.column("region"), gone)))

    earlier = pending.take(committed_txns.select(["region", "start_ts"]))
    pending.drop(rolled_back)
    out: dict[str, list[pa.Table]] = {}
    for table, rows in values.items():
        evs = rows.column("row")
        rows = _with_events(events, rows)
        kinds = rows.column("type")
        is_prewrite = pc.equal(kinds, ev.PREWRITE)
        every = rows.filter(is_prewrite)
        prewrites, repeated = _first_per_key(every)
        if repeated is not None:  # retransmitted, or written twice
            rewritten = _rewritten(
                compute, every.take(repeated), evs.filter(is_prewrite).take(repeated)
            )
            if rewritten is not None:
                raise _Rewritten(rewritten)
        fresh = prewrites.drop_columns(["type", "commit_ts"]).join(
            committed_txns, ["region", "start_ts"], join_type="inner"
        )
        parts = [_renamed(fresh, "fcommit", "commit_ts")]
        still_open = prewrites.join(open_txns, ["region", "start_ts"], join_type="left semi")
        if still_open.num_rows:
            pending.add(table, still_open.drop_columns(["type", "commit_ts"]))
        selfcontained = rows.filter(
            pc.and_(pc.equal(kinds, ev.COMMITTED), pc.greater(rows.column("commit_ts"), floor))
        ).drop_columns(["type"])
        parts.append(selfcontained)
        out.setdefault(table, []).extend(parts)
    for table, rows in earlier.items():
        rows = rows.join(committed_txns, ["region", "start_ts"], join_type="inner")
        out.setdefault(table, []).append(_renamed(rows, "fcommit", "commit_ts"))
    result: dict[str, pa.Table] = {}
    for table, parts in out.items():
        aligned = [_committed_layout(p) for p in parts if p.num_rows]
        if not aligned:
            continue
        rows = pa.concat_tables(aligned, promote_options="none")
        rows = rows.filter(pc.greater(rows.column("commit_ts"), floor))
        if rows.num_rows:
            result[table] = rows
    return result


def _with_events(events: pa.Table, rows: pa.Table) -> pa.Table:
    """A table's value rows with their events' region, start_ts, commit_ts, type, key, op."""
    picked = events.select(["region", "start_ts", "commit_ts", "type", "key", "op"]).take(
        rows.column("row")
    )  # only the columns it needs are copied
    for name in picked.column_names:
        rows = rows.append_column(name, picked.column(name))
    return rows.drop_columns(["row"])


class _Rewritten(Exception):
    def __init__(self, violation: _Violation) -> None:
        self.violation = violation


def _rewritten(compute: Compute, prewrites: pa.Table, evs: pa.ChunkedArray) -> _Violation | None:
    """The first PREWRITE of a (region, start_ts, key) seen before whose row differs from
    the first one's: a retransmission repeats an event as it was, and a transaction
    writes each key once. ``evs``: the events' positions."""
    own = [c for c in prewrites.column_names if c not in ("region", "start_ts", "key", "type")]
    if _as_first(prewrites, own, evs):  # (as every retransmission is: no query)
        return None
    p = prewrites.select(own).rename_columns([f"v{i}" for i in range(len(own))])
    for name in ("region", "start_ts", "key"):
        p = p.append_column(f"_{name}", prewrites.column(name))
    p = p.append_column("_ev", evs)
    differs = " OR ".join(f'a."v{i}" IS DISTINCT FROM b."v{i}"' for i in range(len(own)))
    first = compute.query(
        "WITH n AS (SELECT *, row_number() OVER (PARTITION BY _region, _start_ts, _key"
        " ORDER BY _ev) AS _k FROM p)"
        " SELECT b._ev, b._start_ts, b._key FROM n a JOIN n b ON a._region = b._region"
        " AND a._start_ts = b._start_ts AND a._key = b._key AND a._k = 1 AND b._k > 1"
        f" WHERE {differs} ORDER BY b._ev LIMIT 1",
        p=p,
    )
    if not first.num_rows:
        return None
    row = first.to_pylist()[0]
    return _Violation(row["_ev"], (
        f"PREWRITE of key {row['_key']!r} by transaction {row['_start_ts']} again, with"
        " another row than before (a transaction writes each key once; a retransmission"
        " repeats the event as it was)"))  # fmt: skip


_TXN_KEY = [*_TXN, "key"]


def _as_first(prewrites: pa.Table, own: list[str], evs: pa.ChunkedArray) -> bool:
    """Whether every PREWRITE equals the first of its (region, start_ts, key) in each of
    ``own``, by Arrow's equality (NULL as NULL). False wherever Arrow cannot tell as SQL
    would (a NaN, which Arrow finds unequal to itself; a NULL in the key): SQL then
    decides."""
    if any(prewrites.column(c).null_count for c in _TXN_KEY):
        return False
    keyed = prewrites.select(_TXN_KEY).append_column("_ev", evs)
    rows = prewrites.take(pc.sort_indices(keyed, [(c, "ascending") for c in [*_TXN_KEY, "_ev"]]))
    n = rows.num_rows
    starts = np.zeros(n, dtype=bool)
    starts[:1] = True
    for c in _TXN_KEY:
        column = rows.column(c)
        moved = pc.not_equal(column.slice(1), column.slice(0, n - 1))
        starts[1:] |= moved.to_numpy(zero_copy_only=False)
    first = np.flatnonzero(starts)[np.cumsum(starts) - 1]
    for c in own:  # (every column type a table declares compares in Arrow: schema.py)
        a = rows.column(c)
        b = a.take(first)
        same = pc.or_(pc.fill_null(pc.equal(a, b), False), pc.and_(pc.is_null(a), pc.is_null(b)))
        if not pc.all(same).as_py():
            return False
    return True


def _first_per_key(prewrites: pa.Table) -> tuple[pa.Table, np.ndarray | None]:
    """One prewrite per (region, start_ts, key): a retransmission adds nothing. Also the
    positions of every prewrite of a (region, start_ts, key) seen more than once (None
    when there is none), for :func:`_rewritten` to compare."""
    if prewrites.num_rows < 2:
        return prewrites, None
    numbered = prewrites.select(_TXN_KEY).append_column(
        "_n", pa.array(np.arange(prewrites.num_rows))
    )
    # (in Arrow: on a batch's few thousand rows a DuckDB query costs twice as much)
    groups = numbered.group_by(_TXN_KEY, use_threads=False).aggregate(
        [("_n", "min"), ("_n", "count")]
    )
    if groups.num_rows == prewrites.num_rows:
        return prewrites, None
    firsts = prewrites.take(np.sort(groups.column("_n_min").to_numpy()))
    # the rows of the few groups repeated, found by a join against those groups alone
    twice = groups.filter(pc.greater(groups.column("_n_count"), 1)).column("_n_min")
    repeated = numbered.join(numbered.take(twice).select(_TXN_KEY), _TXN_KEY, join_type="left semi")
    return firsts, np.sort(repeated.column("_n").to_numpy())


def _renamed(table: pa.Table, old: str, new: str) -> pa.Table:
    return table.rename_columns([new if c == old else c for c in table.column_names])


_FRONT = ("key", "start_ts", "commit_ts", "op")


def renamed_since_kept(names: Sequence[str], primary_key: Sequence[str]) -> dict[str, str]:
    """A table's columns whose name in kept rows (pending, buffered) is now another
    (``schema.change_column``), old name to new: rows an earlier version kept name them
    as declared. Not the fields kept beside them (``region`` and :data:`_FRONT`), nor
    ``__old_<pk>``: a column so named could not be kept then."""
    kept = {"region", *_FRONT, *(OLD_PREFIX + c for c in primary_key)}
    return {c: change_column(c) for c in names if change_column(c) != c and c not in kept}


def _committed_layout(rows: pa.Table) -> pa.Table:
    """Committed rows as the buffer keeps them: key, start_ts, commit_ts, op, then values."""
    rest = [c for c in rows.column_names if c not in (*_FRONT, "region", "type")]
    return rows.select([*_FRONT, *rest])


def _bad(files: Sequence[str], events: pa.Table, violation: _Violation) -> BadRecordError:
    row = events.slice(violation.ev, 1).select(["file", "line"]).to_pylist()[0]
    return BadRecordError(files[row["file"]], int(row["line"]), violation.reason)


def regions_json(regions: Mapping[int, RegionState]) -> str:
    """The regions as text, for diagnostics."""
    return json.dumps({r: [s.start_key, s.end_key, list(s.parents), s.resolved, s.retired]
                       for r, s in regions.items()})  # fmt: skip
