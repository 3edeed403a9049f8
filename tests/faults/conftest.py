"""Fixtures of the bad-input, config, foreign-writer, maintenance and storage tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.bank import write_start


@pytest.fixture
def bank(tmp_path: Path) -> Path:
    """The hand-made bank of :mod:`tests.helpers.bank`: config and first segments."""
    return write_start(tmp_path)
