"""spark-submit entry point: ``spark-submit jobs/run_view.py CONFIG [--once]``."""

from __future__ import annotations

import sys

from deltamv.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", *sys.argv[1:]]))
