"""delta-spark, Delta Lake's reference implementation, on deltamv's Spark sessions.

deltamv commits with delta-rs (:mod:`.commit`); Spark reads, time-travels and follows
the tables with delta-spark when its jars are on the session's class path. ``make
setup`` fetches them once with Maven into ``<venv>/delta-jars``
(``scripts/fetch-delta-jars.sh``); :func:`session_conf` puts them on ``spark.jars`` and
turns on Delta's SQL extension and catalog, so no session resolves anything at start.
Without the jars everything still works: reads fall back to a version's file list
(:mod:`.read`). See docs/delta-spark.md.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from deltamv.errors import DeltaMVError, first_line

__all__ = [
    "CATALOG",
    "EXTENSION",
    "available",
    "fetched_jars",
    "jars_folder",
    "read_version",
    "session_conf",
]

EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
_DATA_SOURCE = "org.apache.spark.sql.delta.sources.DeltaDataSource"
#: A folder of jars to use instead of ``<sys.prefix>/delta-jars``.
JARS_ENV = "DELTAMV_DELTA_JARS"
#: ``0`` leaves Delta off deltamv's sessions (reads then use file lists).
SWITCH_ENV = "DELTAMV_DELTA_SPARK"
_STAMP = ".fetched"
_CATALOG_KEY = "spark.sql.catalog.spark_catalog"
_EXTENSIONS_KEY = "spark.sql.extensions"
# delta-spark rebuilds a version's file list with a shuffle over this many partitions
# (50 by default): on deltamv's small logs in local mode one is several times faster.
_SNAPSHOT_PARTITIONS = "spark.databricks.delta.snapshotPartitions"


def jars_folder() -> Path:
    """Where the set-up put the delta-spark jars: ``$DELTAMV_DELTA_JARS`` or the venv's."""
    given = os.environ.get(JARS_ENV)
    return Path(given) if given else Path(sys.prefix) / "delta-jars"


def fetched_jars() -> list[str]:
    """The jars of a complete fetch (the set-up's stamp is there), sorted; else none."""
    folder = jars_folder()
    if not (folder / _STAMP).is_file():
        return []
    return sorted(str(p) for p in folder.glob("*.jar"))


def session_conf(
    given: Mapping[str, str], *, jvm_running: bool, jvm_conf: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The settings that put delta-spark on a session about to be built.

    ``given`` holds the settings the builder will get. ``jvm_running``: a driver JVM is
    already up (spark-submit, or an earlier session in this process), so ``spark.jars``
    can no longer reach the driver's class path: Delta is then configured only if its
    classes already load there (``--jars``/``--packages``), with ``jvm_conf`` being that
    JVM's settings. A user's own ``spark.sql.extensions`` is kept (Delta's is appended)
    and a user's ``spark_catalog`` wins. Returns no settings when
    ``DELTAMV_DELTA_SPARK=0`` or when Delta is neither fetched nor already on the class path.
    """
    if os.environ.get(SWITCH_ENV, "1").strip() == "0":
        return {}
    have = {**(jvm_conf or {}), **given}
    out: dict[str, str] = {}
    if jvm_running:
        if not _classes_load():
            return {}
    elif not _user_supplies_delta(have):
        jars = fetched_jars()
        if not jars:
            return {}
        out["spark.jars"] = ",".join(j for j in [have.get("spark.jars", ""), *jars] if j)
    extensions = [e.strip() for e in have.get(_EXTENSIONS_KEY, "").split(",") if e.strip()]
    if EXTENSION not in extensions:
        out[_EXTENSIONS_KEY] = ",".join([*extensions, EXTENSION])
    if _CATALOG_KEY not in have:
        out[_CATALOG_KEY] = CATALOG
    if _SNAPSHOT_PARTITIONS not in have:
        out[_SNAPSHOT_PARTITIONS] = "1"
    return out


def available(spark: SparkSession) -> bool:
    """True when ``spark`` reads Delta tables with delta-spark (its data source loads).

    Reads (``spark.read.format("delta")``) need only this; SQL such as ``DESCRIBE
    HISTORY`` and ``delta.`path``` also needs Delta's extension and catalog, which
    deltamv's sessions get together with the jars.
    """
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:  # Spark Connect: no JVM of ours to ask
        return False
    return _loads(jvm, _DATA_SOURCE)


def read_version(spark: SparkSession, table_path: str, version: int) -> DataFrame:
    """Version ``version`` of the table, read by delta-spark (``versionAsOf``).

    The version is named explicitly, so the DataFrame stays on it while newer versions
    are committed. DeltaMVError (one line) when delta-spark cannot rebuild the version
    (log cleanup dropped the entries it needs). A version whose files VACUUM deleted
    fails later, when its rows are read: Spark reports the missing file.
    """
    from pyspark.errors import AnalysisException

    try:
        return spark.read.format("delta").option("versionAsOf", version).load(table_path)
    except AnalysisException as e:
        raise DeltaMVError(
            f"delta-spark cannot read version {version} of {table_path}: {first_line(e)}"
        ) from e


def _user_supplies_delta(conf: Mapping[str, str]) -> bool:
    """The settings or the pyspark launcher already bring delta-spark's jar."""
    places = [
        conf.get("spark.jars", ""),
        conf.get("spark.jars.packages", ""),
        os.environ.get("PYSPARK_SUBMIT_ARGS", ""),
    ]
    return any("delta-spark" in p for p in places)


def _classes_load() -> bool:
    from pyspark import SparkContext

    SparkContext._ensure_initialized()  # connects to the running gateway
    return SparkContext._jvm is not None and _loads(SparkContext._jvm, EXTENSION)


def _loads(jvm: object, name: str) -> bool:
    from py4j.java_gateway import JavaClass

    node = jvm
    for part in name.split("."):
        node = getattr(node, part)
    return isinstance(node, JavaClass)
