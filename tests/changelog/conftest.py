from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def changelog(tmp_path: Path) -> Path:
    """An empty change-log folder (write segments with tests.helpers.changelog)."""
    path = tmp_path / "changelog"
    path.mkdir()
    return path
