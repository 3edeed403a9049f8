"""The ground truth of a simulated run: every committed transaction, replayable to any ts.

Format (``<run>/truth/``, documented in docs/truth-format.md):

- ``meta.json``: ``{"format": "deltamv-sim-truth/1", "workload", "args", "tables":
  {name: {"schema": DDL, "primary_key": [...]}}, "snapshot_ts", "final_watermark",
  "transactions", ...}``
- ``transactions.jsonl``: one committed transaction per line, in increasing
  ``commit_ts``: ``{"start_ts", "commit_ts", "rows": [{"table", "key", "op", "value"}]}``
  (``value`` is the whole row for ``PUT``, null for ``DELETE``).
"""

from __future__ import annotations

import json
import os
from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from deltamv.errors import DeltaMVError
from deltamv.schema import TableSchema
from deltamv.sim._rows import state_to_tables

TRUTH_FORMAT = "deltamv-sim-truth/1"


@dataclass(frozen=True)
class TruthRow:
    table: str
    key: str
    op: str
    value: dict[str, Any] | None


@dataclass(frozen=True)
class TruthTxn:
    """One committed transaction."""

    start_ts: int
    commit_ts: int
    rows: tuple[TruthRow, ...]


class Truth:
    """Every committed transaction of a run and the table states they produce."""

    def __init__(
        self,
        transactions: list[TruthTxn],
        tables: Mapping[str, tuple[str, tuple[str, ...]]],
        *,
        snapshot_ts: int | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        self.transactions = sorted(transactions, key=lambda t: t.commit_ts)
        self.tables = dict(tables)
        self.schemas = {name: TableSchema.from_ddl(ddl) for name, (ddl, _pk) in self.tables.items()}
        self.snapshot_ts = snapshot_ts
        self.meta = dict(meta or {})
        self._commits = [t.commit_ts for t in self.transactions]
        # Replay cursor: state after applying transactions[:_applied].
        self._applied = 0
        self._state: dict[str, tuple[str, dict[str, Any]]] = {}

    @classmethod
    def load(cls, folder: str | os.PathLike[str]) -> Truth:
        """Read a run's truth; ``folder`` is the run folder or its ``truth/`` folder."""
        path = Path(folder)
        if not (path / "meta.json").exists() and (path / "truth" / "meta.json").exists():
            path = path / "truth"
        try:
            meta = json.loads((path / "meta.json").read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise DeltaMVError(f"{path} holds no simulator truth (meta.json missing)") from None
        if meta.get("format") != TRUTH_FORMAT:
            raise DeltaMVError(f"{path}/meta.json: unknown truth format {meta.get('format')!r}")
        txns: list[TruthTxn] = []
        txn_file = path / "transactions.jsonl"
        if txn_file.exists():
            with txn_file.open(encoding="utf-8") as fh:
                for line in fh:
                    if not line.strip():
                        continue
                    raw = json.loads(line)
                    rows = tuple(
                        TruthRow(r["table"], r["key"], r["op"], r.get("value")) for r in raw["rows"]
                    )
                    txns.append(TruthTxn(raw["start_ts"], raw["commit_ts"], rows))
        tables = {n: (t["schema"], tuple(t["primary_key"])) for n, t in meta["tables"].items()}
        return cls(txns, tables, snapshot_ts=meta.get("snapshot_ts"), meta=meta)

    def commit_timestamps(self) -> list[int]:
        """Every commit ts, ascending."""
        return list(self._commits)

    def state_at(self, ts: int) -> dict[str, tuple[str, dict[str, Any]]]:
        """The rows as of ``ts`` (every transaction with ``commit_ts <= ts``): key -> (table, row)."""
        upto = bisect_right(self._commits, ts)
        if upto < self._applied:
            self._applied, self._state = 0, {}
        for txn in self.transactions[self._applied : upto]:
            for row in txn.rows:
                if row.op == "DELETE":
                    self._state.pop(row.key, None)
                else:
                    assert row.value is not None
                    self._state[row.key] = (row.table, row.value)
        self._applied = upto
        return dict(self._state)

    def tables_at(self, ts: int) -> dict[str, pa.Table]:
        """Every table as of ``ts``, rows ordered by key, columns typed per the DDL."""
        return state_to_tables(self.state_at(ts), self.schemas)
