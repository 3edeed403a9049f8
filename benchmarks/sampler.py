"""A wall-clock stack sampler for every Python thread of this process.

cProfile and pyinstrument see only the thread that starts them, and a deltamv batch
runs in the thread through which Spark's streaming engine calls ``foreachBatch`` (py4j's
callback server), so they miss it; py-spy is not installed here. This samples
``sys._current_frames()`` every ``interval`` seconds from a daemon thread and charges
the time since the previous sample to the stack it sees, per thread. No code of the job
is wrapped or patched.

Caveat: a sample is taken only when the sampler holds the GIL, so time spent in a C
call that keeps the GIL (some SQLite or pyarrow calls) lands on the stack seen when the
call returns, i.e. still on the calling line's function; the per-function totals are
right to within a sampling interval per call.
"""

from __future__ import annotations

import collections
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

SRC = str(Path(__file__).resolve().parent.parent / "src")

_BATCH = "deltamv/job/batch.py:run"  # a micro-batch (BatchRunner.run)
_WAIT = "deltamv/job/run.py:_await"  # the main thread waiting for the streaming query

# Frames that mean "waiting on something outside Python": charged to a named bucket.
_BOUNDARIES = (
    ("py4j/", "JVM (py4j call)"),
    ("sqlite3", "SQLite"),
    ("duckdb", "DuckDB"),
    ("pyarrow/", "pyarrow"),
    ("deltalake/", "delta-rs"),
)


class StackSampler:
    """Samples all threads; ``report()`` summarises the threads that ran deltamv code."""

    def __init__(self, interval: float = 0.005, *, focus: str = SRC) -> None:
        self.interval = interval
        self.focus = focus
        self.parts: dict[str, _Part] = collections.defaultdict(_Part)
        self.waiting = 0.0  # the main thread blocked in awaitTermination
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stack-sampler", daemon=True)

    def __enter__(self) -> StackSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        me = threading.get_ident()
        last = time.perf_counter()
        while not self._stop.wait(self.interval):
            now = time.perf_counter()
            dt, last = now - last, now
            for ident, frame in sys._current_frames().items():
                if ident != me:
                    self._charge(frame, dt)

    def _charge(self, frame: FrameType | None, dt: float) -> None:
        stack: list[tuple[str, str]] = []  # (label, filename), innermost first
        lines: list[int] = []
        f = frame
        while f is not None:
            code = f.f_code
            stack.append((_label(code.co_filename, code.co_name), code.co_filename))
            lines.append(f.f_lineno)
            f = f.f_back
        if not any(name.startswith(self.focus) for _, name in stack):
            return  # an idle thread (callback server, Spark's gateway, this sampler)
        # The innermost deltamv frame owns the time (at the line it is on: a C call such as
        # sqlite3's execute makes no frame); what it waits on is its callee.
        inner = next(i for i, (_, name) in enumerate(stack) if name.startswith(self.focus))
        if stack[inner][0] == _WAIT:
            self.waiting += dt
            return
        labels = {label for label, _ in stack}
        part = self.parts["batch" if _BATCH in labels else "start"]
        owner = f"{stack[inner][0]}:{lines[inner]}"
        callee = _boundary(stack[:inner])
        part.own[owner if callee is None else f"{owner} -> {callee}"] += dt
        seen: set[str] = set()
        for label, name in stack:
            if name.startswith(self.focus) and label not in seen:
                seen.add(label)
                part.inclusive[label] += dt
        if callee is not None:
            part.inclusive[f"[{callee}]"] += dt
        part.total += dt

    def report(self, top: int = 25) -> dict[str, Any]:
        """Per part (``batch``: inside a micro-batch; ``start``: the run's start and
        anything else outside batches): seconds by function, inclusive and own."""

        def ranked(d: dict[str, float]) -> list[tuple[str, float]]:
            return [(k, round(v, 3)) for k, v in sorted(d.items(), key=lambda kv: -kv[1])[:top]]

        return {
            "interval_s": self.interval,
            "waiting_for_query_s": round(self.waiting, 3),
            **{
                name: {
                    "seconds": round(p.total, 3),
                    "inclusive": ranked(p.inclusive),
                    "own": ranked(p.own),
                }
                for name, p in sorted(self.parts.items())
            },
        }


class _Part:
    def __init__(self) -> None:
        self.inclusive: dict[str, float] = collections.defaultdict(float)
        self.own: dict[str, float] = collections.defaultdict(float)
        self.total = 0.0


def _label(filename: str, name: str) -> str:
    if filename.startswith(SRC):
        return f"{filename[len(SRC) + 1 :]}:{name}"
    return f"{Path(filename).name}:{name}"


def _boundary(inner: list[tuple[str, str]]) -> str | None:
    """What the innermost deltamv frame is calling: a known library (py4j, pyarrow, ...)
    anywhere below it, else the function it calls directly; None for its own code."""
    if not inner:
        return None
    for _, filename in inner:
        for marker, bucket in _BOUNDARIES:
            if marker in filename:
                return bucket
    return inner[-1][0]
