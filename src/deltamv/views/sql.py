"""Checking view and invariant SQL against the declared tables, before any input is read."""

from __future__ import annotations

from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import BooleanType

from deltamv.config import JobConfig
from deltamv.errors import ConfigError, first_line
from deltamv.schema import alike_names
from deltamv.views.ivm import W as WEIGHT


def register_empty_tables(spark: SparkSession, config: JobConfig) -> dict[str, DataFrame]:
    frames = {}
    for name, table in config.tables.items():
        df = spark.createDataFrame([], table.schema.to_ddl())
        df.createOrReplaceTempView(name)
        frames[name] = df
    return frames


def check_sql(spark: SparkSession, config: JobConfig) -> None:
    """Analyse every view's and invariant's SQL over empty tables of the declared schemas.

    Raises ConfigError naming ``views.<name>.sql`` (or the invariant's key) when the SQL
    does not parse or names a table or column that is not declared.
    """
    register_empty_tables(spark, config)
    views: dict[str, DataFrame] = {}
    for name, view in config.views.items():
        try:
            views[name] = spark.sql(view.sql)
            views[name].schema  # noqa: B018 - forces analysis
        except PySparkException as exc:
            raise ConfigError(f"views.{name}.sql", first_line(exc), source=config.origin) from None
        names = views[name].schema.names
        if not names:
            raise ConfigError(
                f"views.{name}.sql", "the query returns no columns", source=config.origin
            )
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
    for name, inv in config.invariants.items():
        views[inv.view].createOrReplaceTempView(inv.view)
        analyse_invariant(spark, config, name)
    for name in config.views:
        spark.catalog.dropTempView(name)


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
