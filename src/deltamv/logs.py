"""How deltamv's own lines look on stderr: the time, the logger, the message."""

from __future__ import annotations

import logging
import sys


def to_stderr(level: int) -> None:
    """Send the ``deltamv`` loggers' lines from ``level`` up to stderr, in deltamv's form,
    and only there (not through the root logger's handlers too)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(message)s"))
    ours = logging.getLogger("deltamv")
    ours.handlers[:] = [handler]
    ours.setLevel(level)
    ours.propagate = False
