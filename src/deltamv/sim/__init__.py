"""A deterministic TiKV-style upstream: change logs (docs/changelog-format.md) plus ground truth.

``simulate(workload, out, ...)`` writes ``out/changelog/``, ``out/config.toml``,
``out/truth/`` and optionally ``out/snapshot/``. :func:`workload_toml` renders a job
config for a workload's tables, views and invariants (the demo uses it too).
:mod:`deltamv.sim.truth` replays the truth to any timestamp,
:mod:`deltamv.sim.conformance` checks a change log against the format's rules, and
:mod:`deltamv.sim.reference` is a plain reader used as an oracle.
"""

from __future__ import annotations

from deltamv.sim._output import job_toml, workload_toml
from deltamv.sim.engine import (
    DEFAULT_TXNS,
    FORMATS,
    OPTIONS,
    WATERMARK_MODES,
    WORKLOADS,
    LargeTxnStats,
    SimulationError,
    SimulationResult,
    large_txn_summary,
    simulate,
)
from deltamv.sim.truth import Truth

__all__ = [
    "DEFAULT_TXNS",
    "FORMATS",
    "OPTIONS",
    "WATERMARK_MODES",
    "WORKLOADS",
    "LargeTxnStats",
    "SimulationError",
    "SimulationResult",
    "Truth",
    "job_toml",
    "large_txn_summary",
    "simulate",
    "workload_toml",
]
