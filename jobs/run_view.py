"""spark-submit entry point: ``spark-submit jobs/run_view.py CONFIG [--once]``.

spark-submit starts the driver JVM, so delta-spark's jars go on its command line (the ones
``make setup`` fetched); deltamv's session then adds Delta's SQL extension and catalog::

    spark-submit --jars "$(ls .venv/delta-jars/*.jar | paste -sd, -)" jobs/run_view.py CONFIG --once

``--packages io.delta:delta-spark_4.2_2.13:4.4.0`` instead, where Spark's resolver reaches
Maven Central. Without either the job runs on file-list reads (docs/delta-spark.md).
"""

from __future__ import annotations

import sys

from deltamv.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", *sys.argv[1:]]))
