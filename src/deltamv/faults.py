"""Named crash points for fault-injection tests (``DELTAMV_CRASH_AT``).

``DELTAMV_CRASH_AT=<point>[:<n>]`` makes the process SIGKILL itself the n-th time
(default 1st) it passes ``point``. Unset, :func:`point` costs one dict lookup. Points
are placed where a crash is most likely to break exactly-once (:data:`POINTS`, in the
order a batch passes them; :data:`START_POINTS`, passed only by a job's start). Tests
use it (``tests/faults``, ``tests/postgres``); users never need it.
"""

from __future__ import annotations

import os
import signal
import threading

__all__ = ["POINTS", "START_POINTS", "point"]

POINTS: tuple[str, ...] = (
    "after-stage",  # inside the batch's state transaction, after ingest and maintenance:
    #                 the transaction rolls back, nothing of the batch is in the state
    "after-ingest",  # the state holds the batch and its outbox; no table committed
    "before-commit",  # before a table's sink writes and commits its change (also: between
    #                   two tables of a batch)
    "after-commit",  # a table is committed, the state does not know yet
    "before-finish",  # every table is committed, the batch is not finished in the state
    "after-finish",  # the state finished the batch; Spark has not written its commit log
    "before-maintenance",  # a batch is done; checkpoints and vacuum have not run
)
START_POINTS: tuple[str, ...] = (
    "after-slot",  # a PostgreSQL job's start: the slot was just created, the checkpoint
    #                records that it was about to create it, not yet the slot's position
    "during-copy",  # a PostgreSQL job's start: one batch of the snapshot's copy is in the
    #                 mirror (uncommitted), the rest not copied; the slot exists
)

_counts: dict[str, int] = {}
_lock = threading.Lock()  # (tables commit on threads: each pass counts once)


def point(name: str) -> None:
    """SIGKILL this process here if ``DELTAMV_CRASH_AT`` names ``name`` (see module doc)."""
    spec = os.environ.get("DELTAMV_CRASH_AT")
    if not spec:
        return
    target, _, nth = spec.partition(":")
    if target != name:
        return
    with _lock:
        _counts[name] = _counts.get(name, 0) + 1
        reached = _counts[name] >= int(nth or 1)
    if reached:
        os.kill(os.getpid(), signal.SIGKILL)
