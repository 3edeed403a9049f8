"""The matcher: region streams of events in, committed rows out (into the buffer).

Transaction-level, per region, as the large-transaction watermark RFC requires: the
*first* ``COMMIT`` of a transaction in a region commits all of its prewritten rows in
that region. In ``min-commit-ts`` mode a region's resolved ts may pass a large
transaction right after that first commit, while the COMMITs of its other keys
straggle in later or never; matching key by key would leave those rows pending
below the watermark and lose them.

Every check that needs history (a COMMIT without its PREWRITE, a RESOLVED going
backwards, events after RETIRED) is made here and raised as :class:`BadRecordError`
with the event's file and line. The caller runs a whole batch inside one state
transaction, so a bad record leaves nothing behind.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from deltamv.changelog import events as ev
from deltamv.errors import BadRecordError

_COLUMNS = (
    "file", "line", "region", "type", "start_ts", "commit_ts", "ts", "table", "key", "op",
    "value", "old_value", "start_key", "end_key", "parents",
)  # fmt: skip
_FILE, _LINE, _REGION, _TYPE, _START_TS = 0, 1, 2, 3, 4
_TABLE, _KEY, _OP, _VALUE, _OLD_VALUE = 7, 8, 9, 10, 11


class Matcher:
    """Applies events to the state inside the caller's SQLite transaction.

    ``floor`` is the watermark already applied: a committed row at or below it has
    already been output (or is in the snapshot), so it is a re-emission and dropped.
    """

    def __init__(self, db: sqlite3.Connection, *, floor: int) -> None:
        self.db = db
        self.floor = floor
        self.events = 0
        self._regions: dict[int, list[Any]] = {}
        for row in db.execute(
            "SELECT region, start_key, end_key, parents, resolved, retired FROM regions"
        ):
            self._regions[row[0]] = list(row[1:])
        self._touched: set[int] = set()
        self._prewrites: list[tuple[Any, ...]] = []
        # (region, start_ts) -> finished (committed or rolled back) there; caches the
        # lookup per transaction instead of per row.
        self._finished: dict[tuple[int, int], bool] = {}

    def feed(self, batches: Iterable[pa.RecordBatch | pa.Table]) -> None:
        for batch in batches:
            cols = [batch.column(name).to_pylist() for name in _COLUMNS]
            for row in zip(*cols, strict=True):
                if row[_TYPE] == ev.PREWRITE:
                    self._prewrite_row(row)  # most events: no dict, inserts batched
                else:
                    self._flush_prewrites()
                    self._event(dict(zip(_COLUMNS, row, strict=True)))
        self._flush_prewrites()

    def _prewrite_row(self, row: tuple[Any, ...]) -> None:
        self.events += 1
        region, start_ts = row[_REGION], row[_START_TS]
        state = self._region(region)
        if state[4]:
            raise BadRecordError(
                str(row[_FILE]), int(row[_LINE]), "PREWRITE event after the region's RETIRED"
            )
        if self._is_finished(region, start_ts):
            raise BadRecordError(
                str(row[_FILE]), int(row[_LINE]),
                f"PREWRITE of transaction {start_ts} after its COMMIT or ROLLBACK in this region",
            )  # fmt: skip
        self._prewrites.append(
            (region, start_ts, row[_KEY], row[_TABLE], row[_OP], row[_VALUE], row[_OLD_VALUE])
        )

    def _flush_prewrites(self) -> None:
        if self._prewrites:
            self.db.executemany(
                "INSERT OR IGNORE INTO pending (region, start_ts, key, tbl, op, value, old_value) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                self._prewrites,
            )
            self._prewrites.clear()

    def _is_finished(self, region: int, start_ts: int) -> bool:
        known = self._finished.get((region, start_ts))
        if known is None:
            known = self._done(region, start_ts)[0]
            self._finished[(region, start_ts)] = known
        return known

    def flush(self) -> None:
        """Write the in-memory region rows back (call before computing the watermark)."""
        self._flush_prewrites()
        now_ms = int(time.time() * 1000)
        for region in self._touched:
            start_key, end_key, parents, resolved, retired = self._regions[region][:5]
            self.db.execute(
                "INSERT INTO regions (region, start_key, end_key, parents, resolved, retired, "
                "resolved_since_ms) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(region) DO UPDATE SET "
                "start_key=excluded.start_key, end_key=excluded.end_key, parents=excluded.parents, "
                "resolved_since_ms=CASE WHEN regions.resolved IS excluded.resolved "
                "THEN regions.resolved_since_ms ELSE excluded.resolved_since_ms END, "
                "resolved=excluded.resolved, retired=excluded.retired",
                (region, start_key, end_key, parents, resolved, int(bool(retired)), now_ms),
            )
        self._touched.clear()

    # ------------------------------------------------------------------------------------
    def _region(self, region: int) -> list[Any]:
        state = self._regions.get(region)
        if state is None:
            state = [None, None, "[]", None, 0]
            self._regions[region] = state
        self._touched.add(region)
        return state

    def _event(self, e: dict[str, Any]) -> None:
        self.events += 1
        region = int(e["region"])
        kind = e["type"]
        state = self._region(region)
        if state[4]:
            if kind == ev.RETIRED:
                return  # a retransmitted RETIRED (events may arrive twice in a row)
            self._bad(e, f"{kind} event after the region's RETIRED")
        if kind == ev.COMMIT:
            self._commit(e, region)
        elif kind == ev.ROLLBACK:
            self._rollback(e, region)
        elif kind == ev.COMMITTED:
            self._buffer(
                e["key"],
                e["start_ts"],
                e["commit_ts"],
                e["table"],
                e["op"],
                e["value"],
                e["old_value"],
            )
        elif kind == ev.RESOLVED:
            ts = int(e["ts"])
            if state[0] is None:
                self._bad(e, f"RESOLVED {ts} before the region's INITIALIZED")
            previous = state[3]
            if previous is not None and ts < int(previous):
                self._bad(e, f"RESOLVED going backwards: {ts} after {previous}")
            state[3] = ts
        elif kind == ev.INITIALIZED:
            parents = json.dumps(sorted(int(p) for p in (e["parents"] or [])))
            if state[0] is not None and (state[0], state[1], state[2]) != (
                e["start_key"], e["end_key"], parents,
            ):  # fmt: skip
                self._bad(e, "INITIALIZED again with a different span or parents")
            state[0], state[1], state[2] = e["start_key"], e["end_key"], parents
        elif kind == ev.RETIRED:
            state[4] = 1
            # Unresolved locks of a retired region are re-emitted by its successors.
            self.db.execute("DELETE FROM pending WHERE region = ?", (region,))
            self.db.execute("DELETE FROM done WHERE region = ?", (region,))
            self._finished = {k: v for k, v in self._finished.items() if k[0] != region}
        else:  # the source validates types; this is a bug guard, not input handling
            raise AssertionError(f"unexpected event type {kind!r}")

    def _done(self, region: int, start_ts: object) -> tuple[bool, int | None]:
        row = self.db.execute(
            "SELECT commit_ts FROM done WHERE region = ? AND start_ts = ?", (region, start_ts)
        ).fetchone()
        return (row is not None, None if row is None else row[0])

    def _commit(self, e: dict[str, Any], region: int) -> None:
        start_ts, commit_ts = e["start_ts"], int(e["commit_ts"])
        finished, done_commit = self._done(region, start_ts)
        if finished:
            if done_commit is None:
                self._bad(e, f"COMMIT of transaction {start_ts} after its ROLLBACK in this region")
            if done_commit != commit_ts:
                self._bad(
                    e,
                    f"COMMIT of transaction {start_ts} at {commit_ts}, first committed at {done_commit}",
                )
            return  # a straggling secondary or a retransmission: already committed
        # The first COMMIT here commits every row the transaction prewrote in this region.
        moved = self.db.execute(
            "INSERT INTO buffer (key, start_ts, commit_ts, tbl, op, value, old_value) "
            "SELECT key, start_ts, ?, tbl, op, value, old_value FROM pending "
            "WHERE region = ? AND start_ts = ? AND ? > ? "
            "ON CONFLICT(key, start_ts) DO NOTHING",
            (commit_ts, region, start_ts, commit_ts, self.floor),
        ).rowcount
        removed = self.db.execute(
            "DELETE FROM pending WHERE region = ? AND start_ts = ?", (region, start_ts)
        ).rowcount
        if removed == 0 and moved == 0 and commit_ts > self.floor:
            self._bad(
                e, f"COMMIT of transaction {start_ts} without its PREWRITE in region {region}"
            )
        self.db.execute(
            "INSERT INTO done (region, start_ts, commit_ts) VALUES (?, ?, ?)",
            (region, start_ts, commit_ts),
        )
        self._finished[(region, start_ts)] = True

    def _rollback(self, e: dict[str, Any], region: int) -> None:
        finished, done_commit = self._done(region, e["start_ts"])
        if finished:
            if done_commit is not None:
                self._bad(
                    e, f"ROLLBACK of transaction {e['start_ts']} after its COMMIT in this region"
                )
            return
        self.db.execute(
            "DELETE FROM pending WHERE region = ? AND start_ts = ?", (region, e["start_ts"])
        )
        self.db.execute(
            "INSERT INTO done (region, start_ts, commit_ts) VALUES (?, ?, NULL)",
            (region, e["start_ts"]),
        )
        self._finished[(region, e["start_ts"])] = True

    def _buffer(
        self, key: str, start_ts: int, commit_ts: int, table: str, op: str,
        value: str | None, old_value: str | None,
    ) -> None:  # fmt: skip
        # At or below the applied watermark every transaction was complete already:
        # this is a successor's re-emission of a row that is out (or in the snapshot).
        if int(commit_ts) <= self.floor:
            return
        self.db.execute(
            "INSERT INTO buffer (key, start_ts, commit_ts, tbl, op, value, old_value) "
            "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(key, start_ts) DO NOTHING",
            (key, start_ts, commit_ts, table, op, value, old_value),
        )

    @staticmethod
    def _bad(e: dict[str, Any], reason: str) -> None:
        raise BadRecordError(str(e["file"]), int(e["line"]), reason)
