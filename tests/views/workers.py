"""The Hypothesis sequences of every shape, spread over the machine's cores.

Maintenance and its check (:mod:`.harness`) run on DuckDB alone; Spark only plans the
shapes, once, in the test process. So the shapes' sequences run in worker processes,
all queued at once (with the run's first test, at the lowest priority: the root
``conftest.py``), and a test waits for its shape's result.

Shapes run in groups: one sequence goes through every view of a group at once, as a
job maintains its views, so the group shares the work of the tables' changes (about a
quarter of the CPU, measured with groups of six). Each view is still checked at every
version. If a group's sequences fail, each of its shapes runs alone, so that the one
that fails is told apart. A worker returns, per shape, how many sequences it ran, or the
failure as Hypothesis reports it (the shrunk sequence included).
"""

from __future__ import annotations

import faulthandler
import multiprocessing
import os
import traceback
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings

from deltamv.compute import Compute

from .harness import Planned, Run
from .strategies import Change, Row, batches, snapshot

TABLES = ("accounts", "transfers")


GROUP = 6  # shapes a sequence goes through at once


def sequences(planned: Planned, compute: Compute, shapes: Sequence[str], examples: int) -> int:
    """``examples`` Hypothesis sequences through the views ``shapes``, each checked at
    every version (:meth:`Run.step`); returns how many sequences ran."""
    ran = 0

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
    @given(start=snapshot(TABLES), sequence=batches(TABLES))
    def check(start: dict[str, list[Row]], sequence: list[list[Change]]) -> None:
        nonlocal ran
        ran += 1
        run = Run(planned, shapes, compute)
        try:
            run.load(start)
            for batch in sequence:
                run.step(batch)
        finally:
            run.close()

    check()
    return ran


@dataclass(frozen=True)
class Outcome:
    shape: str
    ran: int
    failure: str | None  # the worker's traceback and Hypothesis' falsifying example


_worker: dict[str, Any] = {}


def _start(planned: Planned) -> None:
    faulthandler.enable()  # a worker that crashes says where (the pool only says it died)
    os.nice(19)  # the sequences run beside the other tests and yield the cores to them
    _worker["planned"] = planned
    _worker["compute"] = Compute(threads=1, memory_limit="256MB")


def _run(shapes: tuple[str, ...], examples: int) -> dict[str, Outcome]:
    """The shapes' sequences together; if they fail, each shape's alone."""
    if len(shapes) > 1:
        try:
            ran = sequences(_worker["planned"], _worker["compute"], shapes, examples)
        except Exception:  # told apart below
            pass
        else:
            return {shape: Outcome(shape, ran, None) for shape in shapes}
    return {shape: _alone(shape, examples) for shape in shapes}


def _alone(shape: str, examples: int) -> Outcome:
    try:
        ran = sequences(_worker["planned"], _worker["compute"], [shape], examples)
    except Exception as error:  # reported to the test that waits for it
        return Outcome(shape, 0, "".join(traceback.format_exception(error)))
    return Outcome(shape, ran, None)


class Workers:
    """A pool of worker processes (one per core, at most two) holding ``planned``."""

    def __init__(self, planned: Planned) -> None:
        self._pool = ProcessPoolExecutor(
            max_workers=min(2, os.cpu_count() or 1),
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_start,
            initargs=(planned,),
        )

    def submit(self, shapes: Sequence[str], examples: int) -> dict[str, Future[dict[str, Outcome]]]:
        """Each shape's group's outcomes (groups of :data:`GROUP`, in the given order)."""
        out = {}
        for i in range(0, len(shapes), GROUP):
            group = tuple(shapes[i : i + GROUP])
            future = self._pool.submit(_run, group, examples)
            out.update(dict.fromkeys(group, future))
        return out

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
