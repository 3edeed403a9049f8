"""Named crash points for fault-injection tests (``DELTAMV_CRASH_AT``).

``DELTAMV_CRASH_AT=<point>[:<n>]`` makes the process SIGKILL itself the n-th time
(default 1st) it passes ``point``. Unset, :func:`point` costs one dict lookup. Points
are placed where a crash is most likely to break exactly-once: between the state
commit and the Delta commits, between two tables' commits, before the batch is
finished. Tests use it; users never need it.
"""

from __future__ import annotations

import os
import signal

_counts: dict[str, int] = {}


def point(name: str) -> None:
    spec = os.environ.get("DELTAMV_CRASH_AT")
    if not spec:
        return
    target, _, nth = spec.partition(":")
    if target != name:
        return
    _counts[name] = _counts.get(name, 0) + 1
    if _counts[name] >= int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)
