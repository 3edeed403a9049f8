"""Checking view and invariant SQL against the declared tables, before any input is read."""

from __future__ import annotations

from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql.types import BooleanType

from deltamv.config import JobConfig
from deltamv.errors import ConfigError, first_line
from deltamv.schema import alike_names
from deltamv.views.ivm import W as WEIGHT
from deltamv.views.plan import Analysed


def check_sql(spark: SparkSession, config: JobConfig) -> Analysed:
    """Analyse every view's and invariant's SQL over empty tables of the declared schemas.

    Raises ConfigError naming ``views.<name>.sql`` (or the invariant's key) when the SQL
    does not parse or names a table or column that is not declared. Returns the views
    analysed, for :func:`~deltamv.views.plan.plan_views` (close it if they are not planned).
    """
    analysed = Analysed(spark, config)
    try:
        for name in config.views:
            _check_view(analysed, name)
        for name, inv in config.invariants.items():
            analysed.frame(inv.view).createOrReplaceTempView(inv.view)
            analyse_invariant(spark, config, name)
    except BaseException:
        analysed.close()
        raise
    finally:
        for name in config.views:
            spark.catalog.dropTempView(name)
    return analysed


def _check_view(analysed: Analysed, name: str) -> None:
    config = analysed.config
    try:
        names = analysed.frame(name).schema.names
    except PySparkException as exc:
        raise ConfigError(f"views.{name}.sql", first_line(exc), source=config.origin) from None
    if not names:
        raise ConfigError(f"views.{name}.sql", "the query returns no columns", source=config.origin)
    if any(n.lower() == WEIGHT for n in names):
        raise ConfigError(
            f"views.{name}.sql",
            f"the query returns a column named {WEIGHT!r}, the name the job gives a"
            " change's weight; name it otherwise with AS",
            source=config.origin,
        )
    twice = alike_names(names)
    if twice:
        raise ConfigError(
            f"views.{name}.sql",
            f"the query returns {' and '.join(map(repr, twice))}: a Delta table's columns"
            " need distinct names (case aside); name them apart with AS",
            source=config.origin,
        )


def analyse_invariant(spark: SparkSession, config: JobConfig, name: str) -> None:
    """Analyse invariant ``name``'s SQL over its view, registered as a temporary view of
    that name. Raises ConfigError naming the invariant's key when the SQL cannot run there,
    or an ``always`` query does not return one BOOLEAN column."""
    inv = config.invariants[name]
    key = f"invariants.{name}.{inv.kind}"
    try:
        fields = spark.sql(inv.sql).schema.fields
    except PySparkException as exc:
        raise ConfigError(key, first_line(exc), source=config.origin) from None
    if inv.kind == "always" and (
        len(fields) != 1 or not isinstance(fields[0].dataType, BooleanType)
    ):
        returned = ", ".join(f"{f.name} {f.dataType.simpleString().upper()}" for f in fields)
        raise ConfigError(
            key,
            "an 'always' invariant must return exactly one BOOLEAN column; over view"
            f" {inv.view!r} it returns {returned or 'none'}",
            source=config.origin,
        )
