"""The view job: a Spark Structured Streaming query from the change log to Delta views.

:class:`ViewJob` runs one job (``deltamv run``); :class:`BatchReport` says what each
micro-batch did. See :mod:`.run` for a run, :mod:`.batch` for one batch.
"""

from __future__ import annotations

from deltamv.job.batch import BatchReport
from deltamv.job.run import ViewJob

__all__ = ["BatchReport", "ViewJob"]
