"""The job's durable state (SQLite): the only package that speaks SQL. See :mod:`.store`."""

from __future__ import annotations

from deltamv.state.store import (
    SCHEMA_VERSION,
    STATE_FILE,
    BatchRecord,
    Progress,
    ReadOnlyState,
    StateStore,
    ViewRecord,
    open_read_only,
)

__all__ = [
    "SCHEMA_VERSION",
    "STATE_FILE",
    "BatchRecord",
    "Progress",
    "ReadOnlyState",
    "StateStore",
    "ViewRecord",
    "open_read_only",
]
