"""PostgreSQL as deltamv's upstream (docs/postgres.md), self-contained.

The pieces, in the order a job uses them:

- :mod:`~deltamv.postgres.connect`: connections with retry; DSNs safe to print.
- :mod:`~deltamv.postgres.catalog`: the tables' schemas, keys and replica identity
  from PostgreSQL's catalog, and the refusals.
- :mod:`~deltamv.postgres.slot`: publication, logical slot with exported snapshot,
  status, advance, drop.
- :mod:`~deltamv.postgres.snapshot`: the tables as of the exported snapshot, as Arrow.
- :mod:`~deltamv.postgres.changes` (with :mod:`~deltamv.postgres.pgoutput`): the
  slot's transactions between two positions as net row changes per table.
- :mod:`~deltamv.postgres.keys`, :mod:`~deltamv.postgres.timestamps`: row identity
  and commit timestamps shared by both paths.
- :mod:`~deltamv.postgres.source`: the ``deltamv-postgres`` Spark streaming source
  (imported separately: it needs pyspark).

See docs/postgres.md.
"""

from __future__ import annotations

from deltamv.postgres.catalog import PgColumn, PgTable, check_declared, read_catalog
from deltamv.postgres.changes import (
    ChangeBatch,
    TableChanges,
    TransactionInfo,
    batch_upper,
    changes_schema,
    read_changes,
    transactions,
)
from deltamv.postgres.connect import Reconnecting, connect, describe_dsn
from deltamv.postgres.keys import row_keys
from deltamv.postgres.lsn import format_lsn, parse_lsn
from deltamv.postgres.slot import (
    ExportedSnapshot,
    SlotOrigin,
    SlotStatus,
    advance_slot,
    check_slot,
    create_slot,
    created_as,
    current_wal_lsn,
    drop_publication,
    drop_slot,
    ensure_publication,
    slot_origin,
    slot_status,
)
from deltamv.postgres.snapshot import (
    TruncatedMeanwhile,
    copy_table,
    copy_tables,
    snapshot_schema,
    snapshot_transaction,
)
from deltamv.postgres.timestamps import commit_tso

__all__ = [
    "ChangeBatch",
    "ExportedSnapshot",
    "PgColumn",
    "PgTable",
    "Reconnecting",
    "SlotOrigin",
    "SlotStatus",
    "TableChanges",
    "TransactionInfo",
    "TruncatedMeanwhile",
    "advance_slot",
    "batch_upper",
    "changes_schema",
    "check_declared",
    "check_slot",
    "commit_tso",
    "connect",
    "copy_table",
    "copy_tables",
    "create_slot",
    "created_as",
    "current_wal_lsn",
    "describe_dsn",
    "drop_publication",
    "drop_slot",
    "ensure_publication",
    "format_lsn",
    "parse_lsn",
    "read_catalog",
    "read_changes",
    "row_keys",
    "slot_origin",
    "slot_status",
    "snapshot_schema",
    "snapshot_transaction",
    "transactions",
]
