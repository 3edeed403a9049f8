"""The ivm section's run for the two kept-aggregate shapes alone, as run for this folder.

    PYTHONPATH=<checkout>/src python run_shapes.py ACCOUNTS BATCHES OUT.json

``PYTHONPATH`` picks the deltamv to measure (a worktree of the commit before, or this
one); the benchmark code is this checkout's.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/

from ivm_shapes import run

VIEWS = ["extremes_by_owner", "distinct_by_owner"]  # the default


def main() -> None:
    run(int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]), sys.argv[4:] or VIEWS)


if __name__ == "__main__":
    main()
