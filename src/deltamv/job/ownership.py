"""Before a job reads anything: are its output tables its own, and untouched by others?

- A path that holds a Delta table some other program (or another deltamv job) wrote is
  refused, naming the config key.
- A source table keeps the columns and primary key it was declared with when the job's
  state took its first rows: the rows kept (the mirrors, changes not yet released) are
  stored with them, and a new column's values in them are unknown.
- Each existing table must be at the version the job's state recorded, or one version
  past it if that commit is this job's own (a crash after the commit, before the state
  heard of it). Commits carry ``deltamv.checkpoint``, a random id of the job's checkpoint,
  so a second job with the same name but another checkpoint is told apart.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from deltamv.config import JobConfig, TableConfig
from deltamv.delta import empty_commit_files
from deltamv.delta.commit import BATCH_KEY, JOB_KEY, owner_of
from deltamv.delta.housekeeping import last_checkpoint
from deltamv.delta.table import DeltaTableHandle
from deltamv.errors import CommitConflictError, ConfigError, StorageError
from deltamv.job.targets import CHECKPOINT_KEY, Target
from deltamv.state.keyed import KEY, mirror_table
from deltamv.state.store import StateStore

__all__ = ["check_declarations", "check_owners", "check_tables"]


def check_owners(config: JobConfig) -> None:
    """Refuse an output path that holds a Delta table another program or job created.

    Runs before the job touches anything (not even its checkpoint)."""
    outputs = [(f"views.{n}.path", v.path) for n, v in config.views.items()]
    outputs += [(f"tables.{n}.path", t.path) for n, t in config.tables.items() if t.path]
    for key, path in outputs:
        owner = owner_of(path)
        if owner != config.name and DeltaTableHandle(path).exists():
            who = f"job {owner!r}" if owner else "something other than deltamv"
            raise ConfigError(key, f"{path} holds a Delta table written by {who}",
                              source=config.origin)  # fmt: skip


def check_tables(
    config: JobConfig,
    targets: Mapping[str, Target],
    handles: Mapping[str, DeltaTableHandle],
    store: StateStore,
    checkpoint_id: str,
) -> None:
    """Refuse tables this checkpoint did not write last (a second job, a foreign writer)."""
    progress = store.progress()
    # The app transaction version of the batch that may be in flight.
    pending = progress.applied_batch + 2
    for target in targets.values():
        handle = handles[target.id]
        current = handle.version()
        recorded = store.committed_version(target.id)
        path = target.path
        if current is None:
            if recorded is not None:
                raise CommitConflictError(
                    f"table {path} is gone but job {config.name!r} committed its version"
                    f" {recorded}: another process deleted it"
                )
            continue
        if recorded is not None and current < recorded:
            raise CommitConflictError(
                f"table {path} is at version {current} but job {config.name!r} committed"
                f" version {recorded}: it was replaced or restored by another writer"
            )
        # From the last log checkpoint on: what readers and delta-rs read of the log
        empty = empty_commit_files(path, after=last_checkpoint(path) or -1, upto=current)
        if empty:
            raise StorageError(
                f"table {path}: commit file {empty[0]} is empty (a write cut short by a crash"
                " or a full disk), so the table no longer holds what was committed; restore"
                " it, or start the job anew with a new checkpoint and new table paths"
            )
        if recorded is not None and not _made_by(handle, recorded, config.name, checkpoint_id):
            raise CommitConflictError(
                f"table {path} version {recorded} is not the commit job {config.name!r} made"
                " there: it was replaced by another writer, or its commit file was damaged"
            )
        base = -1 if recorded is None else recorded
        for info in handle.commits_since(base):
            version = int(str(info.get("version", -1)))
            ours = (
                version == base + 1
                and _made_here(info, config.name, checkpoint_id)
                and str(info.get(BATCH_KEY)) in (str(pending), str(pending - 1))
            )
            if ours:
                continue
            if recorded is None and _made_here(info, config.name, checkpoint_id):
                raise _renamed(config, target, store, targets)
            if recorded is None:
                raise CommitConflictError(
                    f"table {path} holds versions that this job's checkpoint"
                    f" {config.checkpoint} did not write (another job named {config.name!r},"
                    " a new checkpoint, or this one's state deleted): give each job its own"
                    " table paths"
                )
            raise CommitConflictError(
                f"table {path} version {version} was committed by another writer"
                f" ({info.get('operation', 'unknown operation')}, job {info.get(JOB_KEY)!r})"
                f" after job {config.name!r} committed version {recorded}: deltamv stops"
                " rather than overwrite it"
            )
        try:  # before anything is read: a view whose SQL now gives other columns
            handle.check_schema(target.schema)
        except CommitConflictError as exc:
            raise ConfigError(
                target.key,
                f"{exc}; a table keeps its columns: give it a new path",
                source=config.origin,
            ) from None


def check_declarations(config: JobConfig, store: StateStore) -> None:
    """Refuse a table whose columns or primary key differ from those the job's state holds
    its rows with (a change-log job; a PostgreSQL job checks its catalog's columns). Until
    the state takes its first rows (the snapshot, or the start before the first batch) a
    declaration may change: its empty mirror is made anew. A state from before the
    declarations were recorded is checked by its mirrors' column names."""
    started = store.progress().bootstrapped
    gone = sorted(store.tables_with_kept_rows() - set(config.tables))
    if gone:
        one = len(gone) == 1
        raise ConfigError(
            "tables",
            f"{', '.join(gone)} {'is' if one else 'are'} no longer in the config, but the job's"
            f" checkpoint {config.checkpoint} holds changes of {'it' if one else 'them'} not yet"
            " applied (committed above the watermark, or not yet committed): a table whose"
            " changes the change log carries stays in the config; put it back",
            source=config.origin,
        )
    for name, table in config.tables.items():
        now = _declared(table)
        recorded = store.declaration(name)
        if recorded == json.dumps(now):
            continue
        was = json.loads(recorded) if recorded is not None else _mirror_columns(store, name)
        if not started:
            store.drop_table(mirror_table(name))  # it holds no rows: made with the new columns
        elif was is not None:
            columns, key = _changes(was, now)
            if columns or key:
                raise ConfigError(
                    f"tables.{name}.{'schema' if columns else 'primary_key'}",
                    f"the job's checkpoint {config.checkpoint} holds the rows of {name} with"
                    f" {_describe(was)}, and this config {', '.join(columns + key)}: a table"
                    " keeps its columns and primary key for its checkpoint's life (the rows"
                    " held have no values for a new column); restore them, or start the job"
                    " with a new checkpoint and new output paths",
                    source=config.origin,
                )
        store.set_declaration(name, json.dumps(now))


def _declared(table: TableConfig) -> dict[str, list[str]]:
    columns = [
        f"{c.name} {c.ddl_type}{'' if c.nullable else ' NOT NULL'}" for c in table.schema.columns
    ]
    return {"columns": columns, "primary_key": list(table.primary_key)}


def _mirror_columns(store: StateStore, table: str) -> dict[str, list[str]] | None:
    """A state from before the declarations were recorded: its mirror's column names (no
    types, no primary key), or None if it has no mirror of ``table``."""
    names = store.column_names(mirror_table(table))
    return {"columns": [n for n in names if n != KEY], "primary_key": []} if names else None


def _changes(was: dict[str, list[str]], now: dict[str, list[str]]) -> tuple[list[str], list[str]]:
    """What ``now`` changes of ``was``: of the columns (each named with its type, or by
    name alone for a mirror's names), and of the primary key."""
    old = {c.split(" ", 1)[0]: c for c in was["columns"]}
    new = {c.split(" ", 1)[0]: c for c in now["columns"]}
    typed = any(" " in c for c in was["columns"])
    columns = [f"adds {new[n]}" for n in new if n not in old]
    columns += [f"drops {n}" for n in old if n not in new]
    columns += [f"declares {new[n]}" for n in new if typed and n in old and new[n] != old[n]]
    if not columns and list(old) != list(new):
        columns.append(f"orders them ({', '.join(new)})")
    key = []
    if was["primary_key"] and was["primary_key"] != now["primary_key"]:
        key.append(f"declares the primary key ({', '.join(now['primary_key'])})")
    return columns, key


def _describe(declared: dict[str, list[str]]) -> str:
    key = declared["primary_key"]
    return f"columns ({', '.join(declared['columns'])})" + (
        f" and primary key ({', '.join(key)})" if key else ""
    )


def _made_here(info: Mapping[str, object], job: str, checkpoint_id: str) -> bool:
    """A commit's info carries this job's name and checkpoint (a commit of a version
    without the checkpoint key, which older versions of deltamv did not write, counts)."""
    return info.get(JOB_KEY) == job and info.get(CHECKPOINT_KEY, checkpoint_id) == checkpoint_id


def _renamed(
    config: JobConfig, target: Target, store: StateStore, targets: Mapping[str, Target]
) -> ConfigError:
    """This checkpoint wrote the table, for an output of another name: one renamed in the
    config (its state and versions are kept under its name)."""
    gone = sorted(t.replace(":", " ", 1) for t in store.committed_targets() if t not in targets)
    were = f" ({', '.join(gone)}, no longer in the config: renamed?)" if gone else ""
    return ConfigError(
        target.key,
        f"{target.path} holds versions this job wrote for another of its outputs{were}:"
        " an output keeps its path under its name; keep the old name, or give this one a"
        " new path (it is then built there from the tables)",
        source=config.origin,
    )


def _made_by(handle: DeltaTableHandle, version: int, job: str, checkpoint_id: str) -> bool:
    """The commit of ``version`` carries this job's name and checkpoint."""
    found = handle.commits_since(version - 1)
    info = found[0] if found and found[0].get("version") == version else {}
    return _made_here(info, job, checkpoint_id)
