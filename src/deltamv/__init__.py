"""deltamv: strongly consistent materialized views of a TiKV-style change log in Delta Lake."""

from __future__ import annotations

from deltamv.config import JobConfig, load_config
from deltamv.errors import (
    BadRecordError,
    CommitConflictError,
    ConfigError,
    DeltaMVError,
    StateError,
    StorageError,
)

__version__ = "0.1.0"

__all__ = [
    "BadRecordError",
    "CommitConflictError",
    "ConfigError",
    "DeltaMVError",
    "JobConfig",
    "StateError",
    "StorageError",
    "__version__",
    "load_config",
]
