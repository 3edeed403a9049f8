"""The Delta tables a job writes: its output targets.

- ``view``: a view's table at ``views.X.path``;
- ``table``: a published copy of a source table at ``tables.X.path``;
- ``mirror``: the job's own copy of a source table under its checkpoint, kept only when
  a recomputed view (evaluated by Spark) reads that table and it has no published copy.

Each target has one :class:`~deltamv.delta.sink.TableSink` per run, which writes and
idempotently commits its versions. The state records commits by the target's ``id``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import pyarrow as pa

from deltamv.config import JobConfig
from deltamv.delta.sink import TableSink
from deltamv.delta.table import DeltaTableHandle

__all__ = ["CHECKPOINT_KEY", "Target", "TargetKind", "mirror_path", "targets_of"]

TargetKind = Literal["view", "table", "mirror"]
CHECKPOINT_KEY = "deltamv.checkpoint"  # which checkpoint (job instance) committed a version


@dataclass(frozen=True)
class Target:
    kind: TargetKind
    name: str
    path: str
    key: str  # the config key that names the path (for messages)
    schema: pa.Schema
    layout: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"{self.kind}:{self.name}"

    @property
    def internal(self) -> bool:
        return self.kind == "mirror"

    def sink(
        self, handle: DeltaTableHandle, *, app_id: str, job: str, checkpoint_id: str
    ) -> TableSink:
        return TableSink(
            self.path, self.schema, layout=self.layout, app_id=app_id,
            metadata={"deltamv.job": job, CHECKPOINT_KEY: checkpoint_id}, handle=handle,
        )  # fmt: skip


def mirror_path(checkpoint: str, table: str) -> str:
    return os.path.join(checkpoint, "mirrors", table)


def targets_of(
    config: JobConfig,
    views: Mapping[str, tuple[pa.Schema, Sequence[str]]],
    mirrored: Sequence[str],
) -> dict[str, Target]:
    """Every target of a job: its views (schema and layout given), its published table
    copies, and the internal copies of the tables in ``mirrored``."""
    out: dict[str, Target] = {}
    for name, (schema, layout) in views.items():
        t = Target(
            "view", name, config.views[name].path, f"views.{name}.path", schema, tuple(layout)
        )
        out[t.id] = t
    for name, table in config.tables.items():
        columns = table.schema.to_arrow()
        if table.path:
            t = Target("table", name, table.path, f"tables.{name}.path", columns, table.primary_key)
            out[t.id] = t
        elif name in mirrored:
            t = Target("mirror", name, mirror_path(config.checkpoint, name), "job.checkpoint",
                       columns, table.primary_key)  # fmt: skip
            out[t.id] = t
    return out
