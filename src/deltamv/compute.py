"""The in-process columnar engine: DuckDB over Arrow tables, for the batch path.

The pipeline (matching, release) and the incremental view maintenance work on Arrow
tables; relational steps over them (group, join, window) run here, in-process and
vectorised, instead of a Spark job each. Only tables handed to :meth:`Compute.query`
are visible to a query (no replacement scans of Python variables).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping

import duckdb
import pyarrow as pa

__all__ = ["Compute"]


class Compute:
    """One DuckDB connection (in memory, spilling to ``temp_dir``), used by one thread."""

    def __init__(
        self, *, threads: int | None = None, memory_limit: str = "1GB", temp_dir: str | None = None
    ) -> None:
        config: dict[str, str | bool | int | float | list[str]] = {
            "threads": str(threads or min(4, os.cpu_count() or 2)),
            "memory_limit": memory_limit,
            "python_enable_replacements": "false",
            "preserve_insertion_order": "true",
        }
        if temp_dir:
            config["temp_directory"] = temp_dir
        self.con = duckdb.connect(config=config)
        # Spark's session time zone in deltamv (a date of a timestamp, its hour): the
        # machine's own, DuckDB's default, would shift them by the zone's offset.
        self.con.execute("SET TimeZone = 'UTC'")
        self._names: list[str] = []

    @contextlib.contextmanager
    def tables(self, tables: Mapping[str, pa.Table]) -> Iterator[None]:
        """Make ``tables`` visible to queries by name for the duration of the block."""
        for name, table in tables.items():
            self.con.register(name, table)
        try:
            yield
        finally:
            for name in tables:
                with contextlib.suppress(duckdb.Error):
                    self.con.unregister(name)

    def query(self, sql: str, /, **tables: pa.Table) -> pa.Table:
        """The result of ``sql`` over ``tables`` (each visible by its keyword name)."""
        with self.tables(tables):
            return self.con.sql(sql).to_arrow_table()

    def close(self) -> None:
        """Close the connection and let go of it (a closed connection kept alive past
        interpreter exit makes DuckDB's bindings report a leak)."""
        con = self.__dict__.pop("con", None)
        if con is not None:
            con.close()
