"""A plain reference reader: the oracle the production pipeline is compared with.

Deliberately simple, in-memory and obviously correct, it follows
docs/changelog-format.md literally:

- **matcher**: per region, prewritten rows wait under their ``start_ts``; the first
  ``COMMIT`` of a transaction in a region releases *all* of its rows there (large
  transactions' other ``COMMIT``s may straggle or never come); ``ROLLBACK`` and
  ``RETIRED`` drop them.
- **frontier**: each point of the key space stands at the highest ``RESOLVED`` any
  counting region reported for it; a region counts once all its ancestors were read
  through ``RETIRED``; points never covered stand at the start ts. The global
  watermark is the minimum over the key space.
- **buffer**: released rows, deduplicated by ``(key, start_ts)``; the state at the
  watermark is, per key, the newest version with ``commit_ts <= watermark``.

Segments may be fed in any interleaving that keeps each region's own order.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from deltamv.errors import BadRecordError
from deltamv.schema import TableSchema
from deltamv.sim._io import list_changelog, read_segment
from deltamv.sim._rows import state_to_tables


@dataclass
class _Region:
    start_key: str | None = None
    end_key: str | None = None
    parents: tuple[int, ...] = ()
    resolved: int | None = None
    retired: bool = False
    pending: dict[int, dict[str, tuple[str, str, Any]]] = field(default_factory=dict)
    committed: set[int] = field(default_factory=set)
    fed: int = 0  # segments fed so far


class ReferenceReader:
    """Replays change-log events into the committed state at the global watermark.

    ``tables`` maps table name to its DDL schema. With ``snapshot`` (a snapshot
    folder, docs/changelog-format.md) the reader starts from it: its rows are the base state and
    its ``ts`` is the start ts.
    """

    def __init__(
        self,
        tables: Mapping[str, str],
        *,
        primary_keys: Mapping[str, Sequence[str]] | None = None,
        snapshot: str | os.PathLike[str] | None = None,
    ) -> None:
        self.schemas = {name: TableSchema.from_ddl(ddl) for name, ddl in tables.items()}
        self.primary_keys = {
            name: tuple((primary_keys or {}).get(name) or schema.names[:1])
            for name, schema in self.schemas.items()
        }
        self.regions: dict[int, _Region] = {}
        # (key, start_ts) -> (commit_ts, table, op, value)
        self.versions: dict[tuple[str, int], tuple[int, str, str, Any]] = {}
        self.idents: dict[str, tuple[str, tuple[Any, ...]]] = {}  # key -> (table, pk values)
        self.start_ts = 0
        self.base: dict[tuple[str, tuple[Any, ...]], tuple[str, dict[str, Any]]] = {}
        self._high = 0
        if snapshot is not None:
            self._load_snapshot(Path(snapshot))

    @classmethod
    def for_run(
        cls, run_dir: str | os.PathLike[str], *, use_snapshot: bool = True
    ) -> ReferenceReader:
        """A reader for a simulator run folder (tables from its truth)."""
        meta = json.loads((Path(run_dir) / "truth" / "meta.json").read_text(encoding="utf-8"))
        snap = Path(run_dir) / "snapshot"
        return cls(
            {n: t["schema"] for n, t in meta["tables"].items()},
            primary_keys={n: t["primary_key"] for n, t in meta["tables"].items()},
            snapshot=snap if use_snapshot and (snap / "_snapshot.json").exists() else None,
        )

    def _ident(self, table: str, row: Mapping[str, Any]) -> tuple[str, tuple[Any, ...]]:
        return table, tuple(row.get(c) for c in self.primary_keys.get(table, ()))

    def _load_snapshot(self, folder: Path) -> None:
        self.start_ts = int(json.loads((folder / "_snapshot.json").read_text())["ts"])
        self._high = self.start_ts
        for name in self.schemas:
            tdir = folder / name
            if not tdir.is_dir():
                continue
            for f in sorted(tdir.iterdir()):
                if f.name.startswith((".", "_")):
                    continue
                rows = pq.read_table(f).to_pylist() if f.suffix == ".parquet" else [
                    json.loads(line) for line in f.read_text().splitlines() if line.strip()
                ]  # fmt: skip
                for row in rows:
                    self.base[self._ident(name, row)] = (name, row)

    # -- feeding ------------------------------------------------------------------

    def feed_segment(self, region: int, path: str) -> None:
        """Read one segment file of ``region`` (segments of a region in seq order)."""
        for line, event in enumerate(read_segment(path), start=1):
            if isinstance(event, str):
                raise BadRecordError(path, line, event)
            self.feed(region, event, where=f"{path}:{line}")
        self.regions.setdefault(region, _Region()).fed += 1

    def feed(self, region: int, event: Mapping[str, Any], *, where: str = "<event>") -> None:
        """Apply one event of ``region``'s stream."""
        r = self.regions.setdefault(region, _Region())
        kind = event.get("type")
        for field_name in ("value", "old_value"):  # learn which row a key holds
            row = event.get(field_name)
            if isinstance(row, dict) and "key" in event and event["key"] not in self.idents:
                self.idents[event["key"]] = self._ident(event["table"], row)
        if kind == "PREWRITE":
            value = event.get("value") if event.get("op") == "PUT" else None
            r.pending.setdefault(event["start_ts"], {})[event["key"]] = (
                event["table"],
                event["op"],
                value,
            )
        elif kind == "COMMIT":
            start_ts, commit_ts = event["start_ts"], event["commit_ts"]
            rows = r.pending.pop(start_ts, None)
            if rows is not None:  # the first COMMIT here releases the whole transaction here
                r.committed.add(start_ts)
                for key, (table, op, value) in rows.items():
                    self.versions[(key, start_ts)] = (commit_ts, table, op, value)
            elif start_ts not in r.committed:
                raise BadRecordError(where, None, f"COMMIT of {start_ts} without its PREWRITE")
        elif kind == "ROLLBACK":
            r.pending.pop(event["start_ts"], None)
        elif kind == "COMMITTED":
            value = event.get("value") if event.get("op") == "PUT" else None
            self.versions[(event["key"], event["start_ts"])] = (
                event["commit_ts"], event["table"], event["op"], value,
            )  # fmt: skip
        elif kind == "INITIALIZED":
            r.start_key, r.end_key = event["start_key"], event["end_key"]
            r.parents = tuple(event.get("parents") or ())
        elif kind == "RESOLVED":
            if r.resolved is not None and event["ts"] < r.resolved:
                raise BadRecordError(where, None, "RESOLVED going backwards")
            r.resolved = event["ts"]
        elif kind == "RETIRED":
            r.pending.clear()  # successors re-emit what is still outstanding
            r.retired = True
        else:
            raise BadRecordError(where, None, f"unknown event type {kind!r}")

    # -- the frontier -------------------------------------------------------------

    def _counts(self, rid: int, seen: frozenset[int] = frozenset()) -> bool:
        r = self.regions.get(rid)
        if r is None or rid in seen:
            return False
        for parent in r.parents:
            p = self.regions.get(parent)
            if p is None or not p.retired or not self._counts(parent, seen | {rid}):
                return False
        return True

    def global_watermark(self) -> int:
        """The minimum over the key space of the highest counting resolved ts (never decreases)."""
        counting = [
            r for rid, r in self.regions.items()
            if r.start_key is not None and r.resolved is not None and self._counts(rid)
        ]  # fmt: skip
        points = {""} | {r.start_key for r in counting if r.start_key is not None}
        points |= {r.end_key for r in counting if r.end_key}
        watermark: int | None = None
        for point in sorted(points):  # each elementary interval starts at one of these
            best = self.start_ts
            for r in counting:
                assert r.start_key is not None
                if r.start_key <= point and (r.end_key == "" or point < (r.end_key or "")):
                    best = max(best, r.resolved or 0)
            watermark = best if watermark is None else min(watermark, best)
        self._high = max(self._high, watermark or self.start_ts)
        return self._high

    # -- the state ----------------------------------------------------------------

    def state_at(self, ts: int) -> dict[Any, tuple[str, dict[str, Any]]]:
        """(table, primary key) -> (table, row) with every released version up to ``ts``."""
        state = dict(self.base) if ts >= self.start_ts else {}
        newest: dict[str, tuple[int, str, str, Any]] = {}
        for (key, _start), version in self.versions.items():
            commit_ts = version[0]
            if commit_ts <= self.start_ts or commit_ts > ts:
                continue  # already in the snapshot, or not yet consistent
            if key not in newest or newest[key][0] < commit_ts:
                newest[key] = version
        for key in sorted(newest):
            _c, table, op, value = newest[key]
            if op == "DELETE":
                ident = self.idents.get(key)
                if ident is not None:
                    state.pop(ident, None)
            else:
                state[self._ident(table, value)] = (table, value)
        return state

    def tables_at_watermark(self) -> dict[str, pa.Table]:
        """Every table as of the current global watermark (canonical row order)."""
        return self.tables_at(self.global_watermark())

    def tables_at(self, ts: int) -> dict[str, pa.Table]:
        """Every table as of ``ts`` (only meaningful at or below the global watermark)."""
        return state_to_tables(self.state_at(ts), self.schemas)


def replay(changelog: str | os.PathLike[str], reader: ReferenceReader) -> ReferenceReader:
    """Feed a whole change log, region by region."""
    segments, problems = list_changelog(changelog)
    if problems:
        raise BadRecordError(str(changelog), None, problems[0])
    for rid, segs in segments.items():
        for seg in segs:
            reader.feed_segment(rid, seg.path)
    return reader


def rounds(
    segments: Mapping[int, list[Any]], rng: Any, *, max_per_round: int = 3
) -> Iterable[list[tuple[int, Any]]]:
    """Split every region's segments into rounds, unevenly: each round takes 0 to
    ``max_per_round`` next segments of each region (a region may lag many rounds)."""
    cursor = {rid: 0 for rid in segments}
    while any(cursor[rid] < len(segs) for rid, segs in segments.items()):
        batch: list[tuple[int, Any]] = []
        for rid in sorted(segments):
            take = rng.randint(0, max_per_round)
            for seg in segments[rid][cursor[rid] : cursor[rid] + take]:
                batch.append((rid, seg))
            cursor[rid] = min(len(segments[rid]), cursor[rid] + take)
        rng.shuffle(batch)
        # keep each region's own order after the shuffle
        by_region: dict[int, list[Any]] = {}
        for rid, seg in sorted(batch, key=lambda x: (x[0], x[1])):
            by_region.setdefault(rid, []).append(seg)
        order = [rid for rid, _ in batch]
        yield [(rid, by_region[rid].pop(0)) for rid in order]
