"""Hypothesis strategies: rows of the shapes' tables and change sequences over them.

Values come from small pools heavy with NULLs, zeros, ties and repeats, so that groups
share keys, extremes tie, sums cancel to zero and joins find several matches; ids come
from a handful of keys, so that changes hit the same rows again and again.
"""

from __future__ import annotations

import datetime as dt
import functools
import random
from decimal import Decimal
from typing import Any

from hypothesis import strategies as st

Row = dict[str, Any]
Change = tuple[str, int, Row | None]

KEYS = range(6)
# The value pools, shared by the Hypothesis strategies and the seeded generator.
OWNERS: list[Any] = [None, None, "a", "b", "c"]
SMALL: list[Any] = [None, None, -5, 0, 0, 5, 10, 60, 100]
REGION: list[Any] = [None, 1, 2, 3]
CREDIT: list[Any] = [
    None, Decimal("0.00"), Decimal("1.50"), Decimal("-2.25"), Decimal("10.01"),
    Decimal("99999999.99"), Decimal("-0.01"),
]  # fmt: skip
FEE: list[Any] = [None, Decimal("0.000"), Decimal("0.125"), Decimal("-7.500")]
DATE: list[Any] = [None, dt.date(2024, 1, 1), dt.date(2024, 1, 2), dt.date(1969, 12, 31)]
_UTC = dt.UTC
TS: list[Any] = [
    None, dt.datetime(2024, 1, 1, 12, tzinfo=_UTC),
    dt.datetime(2024, 1, 1, 11, 59, 59, 999999, tzinfo=_UTC), dt.datetime(1960, 6, 1, tzinfo=_UTC),
]  # fmt: skip
BOOL: list[Any] = [None, True, False]
RATE: list[Any] = [None, 0.0, -0.0, 1.5, 2.25, -1.0, float("nan"), float("inf"), float("-inf")]
REFS: list[Any] = [None, *KEYS]

# column -> pool, per table; SMALL also draws from -100..100
COLUMNS: dict[str, dict[str, list[Any]]] = {
    "accounts": {"owner": OWNERS, "region": REGION, "balance": SMALL, "credit": CREDIT,
                 "opened": DATE, "seen": TS, "active": BOOL, "rate": RATE},
    "transfers": {"src": REFS, "dst": REFS, "owner": OWNERS, "amount": SMALL, "fee": FEE,
                  "day": DATE, "rate": RATE},
}  # fmt: skip


def _values(pool: list[Any]) -> st.SearchStrategy[Any]:
    values = st.sampled_from(pool)
    return values | st.integers(-100, 100) if pool is SMALL else values


# Strategies are built once: a strategy's first draw works out its properties, at a cost.
IDS = st.integers(0, len(KEYS) - 1)
OTHER_IDS = {key: st.sampled_from([k for k in KEYS if k != key]) for key in KEYS}  # key moves
VALUES = {
    table: {c: _values(pool) for c, pool in columns.items()} for table, columns in COLUMNS.items()
}
COLUMN = {table: st.sampled_from(sorted(columns)) for table, columns in COLUMNS.items()}
KIND = st.sampled_from(["put", "put", "delete", "move", "touch"])


@functools.cache
def _row(table: str, key: int) -> st.SearchStrategy[Row]:
    return st.fixed_dictionaries({"id": st.just(key), **VALUES[table]})


def account(key: int) -> st.SearchStrategy[Row]:
    return _row("accounts", key)


def transfer(key: int) -> st.SearchStrategy[Row]:
    return _row("transfers", key)


ROWS = {"accounts": account, "transfers": transfer}


@st.composite
def snapshot(draw: st.DrawFn, tables: tuple[str, ...]) -> dict[str, list[Row]]:
    """A starting database: a few rows per table (maybe none)."""
    out = {}
    for table in tables:
        keys = draw(st.lists(IDS, max_size=6, unique=True))
        out[table] = [draw(ROWS[table](k)) for k in keys]
    return out


@st.composite
def change(draw: st.DrawFn, tables: tuple[str, ...]) -> list[Change]:
    """One step of a batch: a put (insert or update), a delete (maybe of a row that is
    not there), a primary-key change (delete and put of the moved row) or an update that
    changes one column."""
    table = draw(st.sampled_from(tables))
    key = draw(IDS)
    kind = draw(KIND)
    if kind == "delete":
        return [(table, key, None)]
    row = draw(ROWS[table](key))
    if kind == "move":
        new = draw(OTHER_IDS[key])
        return [(table, key, None), (table, new, {**row, "id": new})]
    if kind == "touch":  # same row twice: the second put wins
        column = draw(COLUMN[table])
        return [(table, key, row), (table, key, {**row, column: draw(VALUES[table][column])})]
    return [(table, key, row)]


@st.composite
def batches(
    draw: st.DrawFn, tables: tuple[str, ...], *, max_batches: int = 5, max_changes: int = 6
) -> list[list[Change]]:
    """A sequence of batches; a batch may be empty or touch one table only."""
    out = []
    steps_of_a_batch = st.lists(change(tables), max_size=max_changes)
    for _ in range(draw(st.integers(1, max_batches))):
        steps = draw(steps_of_a_batch)
        out.append([c for step in steps for c in step])
    return out


# -- the same sequences from a seeded generator (the Spark oracle runs these) -------------
def random_row(rng: random.Random, table: str, key: int) -> Row:
    row: Row = {"id": key}
    for column, pool in COLUMNS[table].items():
        use_range = pool is SMALL and rng.random() < 0.3
        row[column] = rng.randint(-100, 100) if use_range else rng.choice(pool)
    return row


def random_snapshot(rng: random.Random, tables: tuple[str, ...]) -> dict[str, list[Row]]:
    return {
        t: [random_row(rng, t, k) for k in rng.sample(KEYS, rng.randint(0, len(KEYS)))]
        for t in tables
    }


def random_batch(rng: random.Random, tables: tuple[str, ...], max_changes: int) -> list[Change]:
    """As :func:`change` draws them: puts, deletes, key moves, a row touched twice."""
    out: list[Change] = []
    for _ in range(rng.randint(0, max_changes)):
        table = rng.choice(tables)
        key = rng.choice(KEYS)
        kind = rng.choice(["put", "put", "delete", "move", "touch"])
        if kind == "delete":
            out.append((table, key, None))
            continue
        row = random_row(rng, table, key)
        if kind == "move":
            new = rng.choice([k for k in KEYS if k != key])
            out += [(table, key, None), (table, new, {**row, "id": new})]
        elif kind == "touch":
            column = rng.choice(sorted(COLUMNS[table]))
            other = random_row(rng, table, key)
            out += [(table, key, row), (table, key, {**row, column: other[column]})]
        else:
            out.append((table, key, row))
    return out
