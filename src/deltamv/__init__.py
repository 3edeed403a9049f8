"""deltamv: strongly consistent materialized views of a TiKV-style change log in Delta Lake.

What a user calls:

- running a job: :func:`load_config` gives a :class:`JobConfig`; ``ViewJob(config,
  spark).run(once=True)`` runs it and returns a :class:`BatchReport` per batch
  (``deltamv run CONFIG``);
- reading views as of a watermark or a time, one view or several at one common
  watermark: :func:`pick`, :func:`read_arrow`, :func:`read_spark` (``deltamv read``);
- checking: :func:`check_job` (invariants and watermarks at every version, ``deltamv
  check``), :func:`job_status` (freshness and what holds the watermark back, ``deltamv
  status``);
- the errors, one root (:class:`DeltaMVError`) and a family per thing to fix.

The names that need Spark or Delta (the job, the readers, the checks) are imported on
first use, so ``import deltamv`` (and a Spark Python worker importing
:mod:`deltamv.errors`) stays cheap. The job configuration is described in
docs/config.md, the change-log format in docs/changelog-format.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from deltamv.config import JobConfig, load_config
from deltamv.errors import (
    BadRecordError,
    CommitConflictError,
    ConfigError,
    DeltaMVError,
    StateError,
    StorageError,
)

if TYPE_CHECKING:
    from deltamv.check.invariants import CheckReport, check_job
    from deltamv.check.status import JobStatus, job_status
    from deltamv.job import BatchReport, ViewJob
    from deltamv.reader import ConsistentRead, pick, read_arrow, read_spark

__version__ = "0.1.0"

__all__ = [
    "BadRecordError",
    "BatchReport",
    "CheckReport",
    "CommitConflictError",
    "ConfigError",
    "ConsistentRead",
    "DeltaMVError",
    "JobConfig",
    "JobStatus",
    "StateError",
    "StorageError",
    "ViewJob",
    "__version__",
    "check_job",
    "job_status",
    "load_config",
    "pick",
    "read_arrow",
    "read_spark",
]

# name -> the module that defines it; imported when the name is first used.
_LAZY = {
    "BatchReport": "deltamv.job",
    "ViewJob": "deltamv.job",
    "CheckReport": "deltamv.check.invariants",
    "check_job": "deltamv.check.invariants",
    "JobStatus": "deltamv.check.status",
    "job_status": "deltamv.check.status",
    "ConsistentRead": "deltamv.reader",
    "pick": "deltamv.reader",
    "read_arrow": "deltamv.reader",
    "read_spark": "deltamv.reader",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'deltamv' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
