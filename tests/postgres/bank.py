"""A bank on a real PostgreSQL, written from several connections while a job follows it.

The workload (:class:`Bank`) mixes what CONTRACT section 7 promises to handle: transfers,
the same rows changed twice in one transaction, primary-key moves (with their ledger
rows), accounts opened and closed (their money moved first), a large transaction touching
every account, TRUNCATE and refill of a side table, rollbacks (whole and to a savepoint,
which must never show), and a TOASTed column (``note``, stored out of line) that most
updates leave alone. Every transaction keeps the invariants the views check:

- ``SUM(balance)`` over all accounts never changes (money only moves);
- each account's balance is its opening balance plus its ledger rows;
- the side table holds ``SIDE_ROWS`` rows of one generation;
- each account's note is its tag repeated ``NOTE_REPEAT`` times.

:func:`check_versions` reads every committed version of every view and checks them;
:func:`check_final` compares the latest versions with the same SQL run by PostgreSQL.
"""

from __future__ import annotations

import contextlib
import itertools
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
from deltalake import DeltaTable

from deltamv import delta

ACCOUNTS = 40
OPENING = 1000
TOTAL = ACCOUNTS * OPENING
SIDE_ROWS = 5
NOTE_REPEAT = 80  # 32-char tag * 80 = 2,560 bytes: out of line (STORAGE EXTERNAL)
REGIONS = ("north", "south", "east")
OWNERS = [f"o{i}" for i in range(8)]
POISON = 1_000_000_000  # what rolled-back transactions add: would break every invariant

DDL = f"""
CREATE TABLE owners (name text PRIMARY KEY, region text NOT NULL);
CREATE TABLE accounts (
    id bigint PRIMARY KEY, owner text NOT NULL, balance bigint NOT NULL,
    opening bigint NOT NULL, tag text NOT NULL, note text NOT NULL);
ALTER TABLE accounts ALTER COLUMN note SET STORAGE EXTERNAL;
CREATE TABLE ledger (
    id bigserial PRIMARY KEY, account_id bigint NOT NULL, amount bigint NOT NULL,
    kind text NOT NULL);
CREATE TABLE side (id int PRIMARY KEY, gen bigint NOT NULL, v bigint NOT NULL);
CREATE SEQUENCE account_ids START 1000;
CREATE SEQUENCE side_gen START 1;
INSERT INTO owners SELECT 'o' || g, (ARRAY['north','south','east'])[1 + g % 3]
    FROM generate_series(0, {len(OWNERS) - 1}) g;
INSERT INTO accounts SELECT g, 'o' || (g % {len(OWNERS)}), {OPENING}, {OPENING},
    md5(g::text), repeat(md5(g::text), {NOTE_REPEAT})
    FROM generate_series(1, {ACCOUNTS}) g;
INSERT INTO side SELECT g, 0, g FROM generate_series(1, {SIDE_ROWS}) g;
"""

TABLES = ("owners", "accounts", "ledger", "side")

# Each view's SQL runs as written in Spark (the job) and in PostgreSQL (the final check).
VIEWS: dict[str, str] = {
    "total": "SELECT SUM(balance) AS total, COUNT(*) AS accounts FROM accounts",
    "reconcile": (
        "SELECT a.id, a.balance, a.opening, l.moved, l.entries FROM accounts a LEFT JOIN "
        "(SELECT account_id, SUM(amount) AS moved, COUNT(*) AS entries FROM ledger "
        "GROUP BY account_id) l ON a.id = l.account_id"
    ),
    "by_region": (
        "SELECT o.region, SUM(a.balance) AS balance, COUNT(*) AS accounts "
        "FROM accounts a JOIN owners o ON a.owner = o.name GROUP BY o.region"
    ),
    "ledger_totals": (
        "SELECT kind, SUM(amount) AS amount, COUNT(*) AS entries FROM ledger GROUP BY kind"
    ),
    "notes": "SELECT id, tag, note FROM accounts",
    "side_stats": (
        "SELECT COUNT(*) AS n, COUNT(DISTINCT gen) AS gens, COALESCE(SUM(v), 0) AS s FROM side"
    ),
}
KEYS: dict[str, tuple[str, ...]] = {  # how the final comparison orders each view's rows
    "total": (), "reconcile": ("id",), "by_region": ("region",), "ledger_totals": ("kind",),
    "notes": ("id",), "side_stats": (),
}  # fmt: skip


def config_text(
    dsn: str, *, name: str = "pgbank", trigger: str = "1 second", out: str = "out"
) -> str:
    lines = [
        "[job]",
        f'name = "{name}"',
        f'checkpoint = "{out}/_checkpoint"',
        f'trigger_interval = "{trigger}"',
        "",
        "[source]",
        'kind = "postgres"',
        f'dsn = "{dsn}"',
        "",
    ]
    lines += [f"[tables.{t}]\n" for t in TABLES]
    for view, sql in VIEWS.items():
        lines += [f"[views.{view}]", f'sql = "{sql}"', f'path = "{out}/views/{view}"', ""]
    return "\n".join(lines)


def create(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(DDL)


# -- the workload ---------------------------------------------------------------------------

Op = Callable[[psycopg.Connection[Any], random.Random], bool]


@dataclass
class Bank:
    """Writers over ``connections`` connections until :meth:`stop`; counts what committed."""

    dsn: str
    connections: int = 4
    seed: int = 0
    pause: float = 0.0  # seconds between a writer's transactions
    big_every: float = 3.0  # seconds between large transactions (one writer does them)
    committed: Counter[str] = field(default_factory=Counter)
    rolled_back: Counter[str] = field(default_factory=Counter)
    errors: list[BaseException] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> Bank:
        for i in range(self.connections):
            t = threading.Thread(target=self._writer, args=(i,), name=f"bank-writer-{i}")
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=60)
        if self.errors:
            raise self.errors[0]

    def wait_for(self, kinds: Mapping[str, int], timeout: float = 120.0) -> None:
        """Until every kind of transaction in ``kinds`` committed at least that often more
        than when this was called."""
        with self._lock:
            base = Counter(self.committed)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.errors:
                raise self.errors[0]
            with self._lock:
                if all(self.committed[k] - base[k] >= n for k, n in kinds.items()):
                    return
            time.sleep(0.2)
        raise AssertionError(f"workload too slow: {dict(self.committed)} after {timeout} s")

    def _writer(self, index: int) -> None:
        rng = random.Random(self.seed * 1000 + index)
        ops: list[tuple[str, Op, int]] = [
            ("transfer", transfer, 30), ("twice", twice, 10), ("move", move_key, 6),
            ("open", open_account, 4), ("close", close_account, 4), ("note", new_note, 4),
            ("owner", move_owner, 2), ("side", refill_side, 3), ("rollback", rollback, 4),
            ("savepoint", savepoint, 4),
        ]  # fmt: skip
        names = [o[0] for o in ops]
        weights = [o[2] for o in ops]
        last_big = time.monotonic()
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                while not self._stop.is_set():
                    if index == 0 and time.monotonic() - last_big >= self.big_every:
                        name, op = "big", everyone
                        last_big = time.monotonic()
                    else:
                        i = rng.choices(range(len(ops)), weights)[0]
                        name, op = names[i], ops[i][1]
                    try:
                        done = op(conn, rng)
                    except (psycopg.errors.DeadlockDetected,
                            psycopg.errors.SerializationFailure):  # fmt: skip
                        done = False
                    with self._lock:
                        (self.committed if done else self.rolled_back)[name] += 1
                    if self.pause:
                        time.sleep(self.pause)
        except BaseException as exc:  # surfaced by stop() / wait_for()
            self.errors.append(exc)


class _Rollback(Exception):
    pass


@contextlib.contextmanager
def _txn(conn: psycopg.Connection[Any]) -> Any:
    try:
        with conn.transaction():
            yield
    except _Rollback:
        pass


def _pick(conn: psycopg.Connection[Any], rng: random.Random, n: int) -> list[int]:
    ids = [r[0] for r in conn.execute("SELECT id FROM accounts").fetchall()]
    return rng.sample(ids, n) if len(ids) >= n else []


def _lock(conn: psycopg.Connection[Any], ids: list[int]) -> dict[int, int]:
    """Lock the accounts (in id order, against deadlocks); their balances. One that another
    writer removed meanwhile fails the transaction as a serialization failure (retried)."""
    rows = conn.execute(
        "SELECT id, balance FROM accounts WHERE id = ANY(%s) ORDER BY id FOR UPDATE", [ids]
    ).fetchall()
    if len(rows) < len(ids):
        raise psycopg.errors.SerializationFailure("an account went away")
    return {r[0]: r[1] for r in rows}


def _move(conn: psycopg.Connection[Any], a: int, b: int, amount: int, kind: str) -> None:
    conn.execute("UPDATE accounts SET balance = balance - %s WHERE id = %s", [amount, a])
    conn.execute("UPDATE accounts SET balance = balance + %s WHERE id = %s", [amount, b])
    conn.execute(
        "INSERT INTO ledger (account_id, amount, kind) VALUES (%s, %s, %s), (%s, %s, %s)",
        [a, -amount, kind, b, amount, kind],
    )


def transfer(conn: psycopg.Connection[Any], rng: random.Random) -> bool:
    ids = _pick(conn, rng, 2)
    if not ids:
        return False
    with conn.transaction():
        _lock(conn, ids)
        _move(conn, ids[0], ids[1], rng.randint(1, 50), "transfer")
    return True


def twice(conn: psycopg.Connection[Any], rng: random.Random) -> bool:
    """The same rows changed several times in one transaction."""
    ids = _pick(conn, rng, 3)
    if not ids:
        return False
    a, b, c = ids
    with conn.transaction():
        _lock(conn, ids)
        _move(conn, a, b, rng.randint(1, 30), "twice")
        _move(conn, b, a, rng.randint(1, 30), "twice")
        _move(conn, a, c, rng.randint(1, 30), "twice")
        _move(conn, c, b, rng.randint(1, 30), "twice")
    return True


def move_key(conn: psycopg.Connection[Any], rng: random.Random) -> bool:
    """A primary-key move (the note unchanged: TOAST), its ledger rows following, and a
    transfer touching the moved row before and after the move."""
    ids = _pick(conn, rng, 2)
    if not ids:
        return False
    a, b = ids
    with conn.transaction():
        _lock(conn, ids)
        new = conn.execute("SELECT nextval('account_ids')").fetchone()[0]  # type: ignore[index]
        _move(conn, a, b, rng.randint(1, 20), "move")
        conn.execute("UPDATE accounts SET id = %s WHERE id = %s", [new, a])
        conn.execute("UPDATE ledger SET account_id = %s WHERE account_id = %s", [new, a])
        _move(conn, b, new, rng.randint(1, 20), "move")
    return True


def open_account(conn: psycopg.Connection[Any], rng: random.Random) -> bool:
    ids = _pick(conn, rng, 1)
    if not ids:
        return False
    with conn.transaction():
        _lock(conn, ids)
        new = conn.execute("SELECT nextval('account_ids')").fetchone()[0]  # type: ignore[index]
        tag = f"{rng.getrandbits(128):032x}"
        conn.execute(
            "INSERT INTO accounts VALUES (%s, %s, 0, 0, %s, repeat(%s, %s))",
            [new, rng.choice(OWNERS), tag, tag, NOTE_REPEAT],
        )
        _move(conn, ids[0], new, rng.randint(1, 100), "open")
    return True


def close_account(conn: psycopg.Connection[Any], rng: random.Random) -> bool:
    ids = _pick(conn, rng, 2)
    if not ids or conn.execute("SELECT count(*) FROM accounts").fetchone()[0] < ACCOUNTS // 2:  # type: ignore[index]
        return False
    a, b = ids
    with conn.transaction():
        locked = _lock(conn, ids)
        _move(conn, a, b, locked[a], "close")  # its money first, then the account
        conn.execute("DELETE FROM accounts WHERE id = %s", [a])
    return True


def new_note(conn: psycopg.Connection[Any], rng: random.Random) -> bool:
    ids = _pick(conn, rng, 1)
    if not ids:
        return False
    tag = f"{rng.getrandbits(128):032x}"
    cur = conn.execute(
        "UPDATE accounts SET tag = %s, note = repeat(%s, %s) WHERE id = %s",
        [tag, tag, NOTE_REPEAT, ids[0]],
    )
    return cur.rowcount == 1


def move_owner(conn: psycopg.Connection[Any], rng: random.Random) -> bool:
    conn.execute(
        "UPDATE owners SET region = %s WHERE name = %s", [rng.choice(REGIONS), rng.choice(OWNERS)]
    )
    return True


def refill_side(conn: psycopg.Connection[Any], rng: random.Random) -> bool:
    """TRUNCATE and refill in one transaction: every version shows one generation."""
    with conn.transaction():
        conn.execute("LOCK TABLE side IN ACCESS EXCLUSIVE MODE")
        gen = conn.execute("SELECT nextval('side_gen')").fetchone()[0]  # type: ignore[index]
        conn.execute("TRUNCATE side")
        conn.execute(
            "INSERT INTO side SELECT g, %s, g * %s FROM generate_series(1, %s) g",
            [gen, rng.randint(1, 9), SIDE_ROWS],
        )
    return True


def rollback(conn: psycopg.Connection[Any], rng: random.Random) -> bool:
    """A transaction that breaks every invariant, rolled back: it must never show."""
    ids = _pick(conn, rng, 1)
    if not ids:
        return False
    with _txn(conn):
        conn.execute("UPDATE accounts SET balance = balance + %s WHERE id = %s", [POISON, ids[0]])
        conn.execute(
            "INSERT INTO ledger (account_id, amount, kind) VALUES (%s, 1, 'poison')", [ids[0]]
        )
        conn.execute("TRUNCATE side")
        conn.execute("UPDATE accounts SET note = 'poison' WHERE id = %s", [ids[0]])
        raise _Rollback
    return False


def savepoint(conn: psycopg.Connection[Any], rng: random.Random) -> bool:
    """A committed transfer with a rolled-back savepoint inside."""
    ids = _pick(conn, rng, 2)
    if not ids:
        return False
    a, b = ids
    with conn.transaction():
        _lock(conn, ids)
        with _txn(conn):
            conn.execute("UPDATE accounts SET balance = balance + %s WHERE id = %s", [POISON, a])
            conn.execute("DELETE FROM accounts WHERE id = %s", [b])
            raise _Rollback
        _move(conn, a, b, rng.randint(1, 10), "savepoint")
    return True


def everyone(conn: psycopg.Connection[Any], rng: random.Random) -> bool:
    """One transaction touching every account: a ring of payments, one ledger row each."""
    with conn.transaction():
        ids = sorted(
            r[0] for r in conn.execute("SELECT id FROM accounts ORDER BY id FOR UPDATE").fetchall()
        )
        pay = [rng.randint(1, 5) for _ in ids]
        deltas = [(i, pay[k - 1] - pay[k]) for k, i in enumerate(ids)]
        with conn.cursor() as cur:
            cur.executemany(
                "UPDATE accounts SET balance = balance + %s WHERE id = %s",
                [(d, i) for i, d in deltas],
            )
            cur.executemany(
                "INSERT INTO ledger (account_id, amount, kind) VALUES (%s, %s, 'big')", deltas
            )
    return True


# -- checks ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Version:
    view: str
    version: int
    watermark: int
    pg_lsn: str | None
    rows: list[dict[str, Any]]


def versions(out: Path, view: str) -> list[Version]:
    """Every committed version of ``view`` with its commit info and rows."""
    path = str(out / "views" / view)
    history = {int(h["version"]): h for h in DeltaTable(path).history()}
    found = []
    for info in delta.versions(path):
        commit = history[info.version]
        assert info.watermark is not None, f"{view} v{info.version}: no deltamv.watermark"
        rows = delta.read_arrow(path, info.version).to_pylist()
        found.append(
            Version(view, info.version, info.watermark, commit.get("deltamv.pg_lsn"), rows)
        )
    return found


def _lsn(text: str) -> int:
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def check_versions(out: Path, *, total: int = TOTAL) -> dict[str, list[Version]]:
    """The invariants at every version of every view; watermarks strictly increasing with
    ``deltamv.pg_lsn`` on each; the views agree with each other at every watermark."""
    found = {view: versions(out, view) for view in VIEWS}
    for view, vs in found.items():
        assert vs, f"{view}: no version"
        marks = [v.watermark for v in vs]
        assert all(a < b for a, b in itertools.pairwise(marks)), (view, marks)
        missing = [v.version for v in vs if not v.pg_lsn]
        assert not missing, f"{view}: versions without deltamv.pg_lsn: {missing}"
        lsns = [_lsn(v.pg_lsn) for v in vs]  # type: ignore[arg-type]
        assert all(a <= b for a, b in itertools.pairwise(lsns)), (view, lsns)
        for v in vs:
            CHECKS[view](v, total)
    # Every view has a version at every watermark, and at each they tell one story.
    marks = {view: [v.watermark for v in vs] for view, vs in found.items()}
    assert len({tuple(m) for m in marks.values()}) == 1, marks
    for at in zip(*found.values(), strict=True):
        by = {v.view: v for v in at}
        accounts = by["total"].rows[0]["accounts"]
        assert len(by["reconcile"].rows) == accounts, by["total"]
        assert len(by["notes"].rows) == accounts
        assert sum(r["accounts"] for r in by["by_region"].rows) == accounts
        assert sum(r["balance"] for r in by["by_region"].rows) == total
        live = {r["id"] for r in by["reconcile"].rows}
        assert live == {r["id"] for r in by["notes"].rows}
        assert len({v.pg_lsn for v in at}) == 1, [(v.view, v.pg_lsn) for v in at]
    return found


def _total(v: Version, total: int) -> None:
    assert len(v.rows) == 1 and v.rows[0]["total"] == total, (v.version, v.rows)


def _reconcile(v: Version, total: int) -> None:
    bad = [r for r in v.rows if r["balance"] != r["opening"] + (r["moved"] or 0)]
    assert not bad, f"reconcile v{v.version}: balance != opening + ledger for {bad[:3]}"


def _by_region(v: Version, total: int) -> None:
    assert sum(r["balance"] for r in v.rows) == total, (v.version, v.rows)


def _ledger(v: Version, total: int) -> None:
    assert sum(r["amount"] for r in v.rows) == 0, (v.version, v.rows)  # every entry has a pair
    assert "poison" not in {r["kind"] for r in v.rows}, (v.version, v.rows)


def _notes(v: Version, total: int) -> None:
    bad = [r["id"] for r in v.rows if r["note"] != r["tag"] * NOTE_REPEAT]
    assert not bad, f"notes v{v.version}: the TOASTed note is wrong for accounts {bad[:5]}"


def _side(v: Version, total: int) -> None:
    row = v.rows[0]
    assert row["n"] == SIDE_ROWS and row["gens"] == 1, (v.version, v.rows)


CHECKS: dict[str, Callable[[Version, int], None]] = {
    "total": _total, "reconcile": _reconcile, "by_region": _by_region, "ledger_totals": _ledger,
    "notes": _notes, "side_stats": _side,
}  # fmt: skip


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else value
    return value


def _ordered(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> list[dict[str, Any]]:
    plain = [{k: _plain(v) for k, v in r.items()} for r in rows]
    return sorted(plain, key=lambda r: tuple(r[k] for k in keys) if keys else repr(r))


def check_final(out: Path, dsn: str) -> None:
    """The latest version of every view equals its SQL evaluated by PostgreSQL now."""
    with psycopg.connect(dsn) as conn:
        for view, sql in VIEWS.items():
            cur = conn.execute(sql)
            names = [d.name for d in cur.description or []]
            expected = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
            got = delta.read_arrow(str(out / "views" / view)).to_pylist()
            assert _ordered(got, KEYS[view]) == _ordered(expected, KEYS[view]), view


def wal_flushed(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return _lsn(conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()[0])  # type: ignore[index]


def position(checkpoint: Path) -> tuple[int, int, int]:
    """The job's committed position: (after_lsn, batch, applied batch)."""
    from deltamv.state import open_read_only

    state = open_read_only(checkpoint)
    if state is None:
        return 0, -1, -1
    try:
        p = state.progress()
        after = int(state.meta().get("source.after_lsn") or 0)
        return after, p.batch, p.applied_batch
    finally:
        state.close()


def wait_caught_up(
    checkpoint: Path, lsn: int, *, timeout: float = 180.0, alive: Callable[[], None] | None = None
) -> None:
    """Until the job committed every transaction below ``lsn``."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        after, batch, applied = position(checkpoint)
        if after >= lsn and applied == batch:
            return
        if alive is not None:
            alive()  # raises if the job died
        time.sleep(0.5)
    raise AssertionError(f"the job did not catch up within {timeout} s: {position(checkpoint)}")


def wait_versions(
    out: Path, count: int, *, timeout: float = 180.0, alive: Callable[[], None] | None = None
) -> None:
    """Until the ``total`` view has at least ``count`` versions."""
    path = str(out / "views" / "total")
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if delta.table_version(path) is not None and len(delta.versions(path)) >= count:
            return
        if alive is not None:
            alive()
        time.sleep(0.5)
    raise AssertionError(f"no {count} versions of {path} within {timeout} s")
