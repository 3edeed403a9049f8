"""A deterministic TiKV-style upstream: change logs per CONTRACT.md section 2 plus ground truth.

``simulate(workload, out, ...)`` writes ``out/changelog/``, ``out/config.toml``,
``out/truth/`` and optionally ``out/snapshot/``. :mod:`deltamv.sim.truth` replays the
truth to any timestamp, :mod:`deltamv.sim.conformance` checks a change log against
the contract, and :mod:`deltamv.sim.reference` is a plain reader used as an oracle.
"""

from __future__ import annotations

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
    "large_txn_summary",
    "simulate",
]
