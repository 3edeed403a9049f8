"""The simulated applications: what each transaction reads and writes.

A workload plans transactions against snapshot reads given by the engine; the
engine runs them through Percolator 2PC. Small transactions are optimistic (read at
``start_ts``, abort on a write-write conflict); large ones lock their keys one by one
in key order and read the latest committed row at lock time (TiDB's pessimistic
mode), so a long prewrite phase does not doom them.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

Row = dict[str, Any]
Reader = Callable[[str], "Row | None"]


class Abort(Exception):
    """Raised by a large transaction's step when it can no longer proceed."""


@dataclass(frozen=True, slots=True)
class Write:
    """One row change of a transaction. ``value`` is None for a DELETE."""

    table: str
    key: str
    op: str
    value: Row | None


def key_of(table: str, ident: int) -> str:
    """The store key of a row: table prefix and a zero-padded id (orders by bytes)."""
    return f"{table}/{ident:010d}"


class IdPool:
    """A set of ids with deterministic O(1) add, remove and random choice."""

    def __init__(self) -> None:
        self._items: list[int] = []
        self._pos: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, item: int) -> bool:
        return item in self._pos

    def add(self, item: int) -> None:
        if item not in self._pos:
            self._pos[item] = len(self._items)
            self._items.append(item)

    def remove(self, item: int) -> None:
        pos = self._pos.pop(item, None)
        if pos is None:
            return
        last = self._items.pop()
        if pos < len(self._items):
            self._items[pos] = last
            self._pos[last] = pos

    def choice(self, rng: random.Random) -> int | None:
        return self._items[rng.randrange(len(self._items))] if self._items else None

    def sample(self, rng: random.Random, k: int) -> list[int]:
        return rng.sample(self._items, min(k, len(self._items)))


@dataclass
class LargePlan:
    """A large transaction: keys locked in this order, each row computed at lock time.

    ``step(index, key, latest_row)`` returns the write for that key (or None to skip
    it) or raises :class:`Abort`.
    """

    keys: list[str]
    step: Callable[[int, str, Row | None], Write | None]
    done: Callable[[], None] = field(default=lambda: None)


class Workload(ABC):
    """Base class: tables, views, invariants and the transaction mix of one application."""

    name: ClassVar[str]
    tables: ClassVar[dict[str, tuple[str, tuple[str, ...]]]]  # name -> (DDL, primary key)
    views: ClassVar[dict[str, str]]
    invariants: ClassVar[dict[str, tuple[str, str, str]]]  # name -> (view, kind, sql)
    defaults: ClassVar[dict[str, Any]] = {}

    def __init__(self, rng: random.Random, options: dict[str, Any]) -> None:
        self.rng = rng
        self.options = {**self.defaults, **options}

    @abstractmethod
    def boundary_keys(self, expected_txns: int) -> list[str]:
        """Plausible keys, sorted, from which initial region boundaries are drawn."""

    @abstractmethod
    def genesis(self) -> list[Write]:
        """The first transaction: the initial rows, committed before any watermark."""

    @abstractmethod
    def plan_small(self, read: Reader) -> list[Write] | None:
        """An ordinary transaction reading at its start ts; None when there is nothing to do."""

    def plan_large(self) -> LargePlan | None:
        """A large transaction, or None."""
        return None

    def on_commit(self, writes: list[Write]) -> None:
        """Learn what a committed transaction wrote (keeps the workload's indexes)."""
        return  # workloads without indexes learn nothing


def _ids(writes: list[Write], table: str) -> list[tuple[Write, int]]:
    return [(w, int(w.key.rsplit("/", 1)[1])) for w in writes if w.table == table]


class Bank(Workload):
    """Accounts and transfers; money is conserved by every transaction."""

    name = "bank"
    tables: ClassVar = {
        "accounts": ("id BIGINT, owner STRING, balance BIGINT", ("id",)),
        "transfers": ("id BIGINT, from_id BIGINT, to_id BIGINT, amount BIGINT", ("id",)),
    }
    views: ClassVar = {
        "total_balance": "SELECT SUM(balance) AS total, COUNT(*) AS accounts FROM accounts",
        "balance_by_owner": (
            "SELECT owner, SUM(balance) AS balance, COUNT(*) AS accounts "
            "FROM accounts GROUP BY owner"
        ),
        "negative_accounts": "SELECT COUNT(*) AS negative FROM accounts WHERE balance < 0",
        "transfer_stats": (
            "SELECT COUNT(*) AS transfers, COALESCE(SUM(amount), 0) AS moved FROM transfers"
        ),
    }
    invariants: ClassVar = {
        "money_is_conserved": ("total_balance", "constant", "SELECT total FROM total_balance"),
        "accounts_are_conserved": (
            "total_balance",
            "constant",
            "SELECT accounts FROM total_balance",
        ),
        "no_negative_balance": (
            "negative_accounts",
            "always",
            "SELECT negative = 0 FROM negative_accounts",
        ),
    }
    defaults: ClassVar = {"accounts": 1000, "initial_balance": 1000, "move_rate": 0.01}

    def __init__(self, rng: random.Random, options: dict[str, Any]) -> None:
        super().__init__(rng, options)
        self.accounts = IdPool()
        self.reserved: set[int] = set()
        self.next_account = int(self.options["accounts"])
        self.next_transfer = 0
        self.owners = max(1, int(self.options["accounts"]) // 10)

    def boundary_keys(self, expected_txns: int) -> list[str]:
        n = int(self.options["accounts"])
        return [key_of("accounts", i) for i in range(n)] + [
            key_of("transfers", i)
            for i in range(0, max(expected_txns, 1), max(1, expected_txns // n or 1))
        ]

    def genesis(self) -> list[Write]:
        balance = int(self.options["initial_balance"])
        return [
            Write("accounts", key_of("accounts", i), "PUT",
                  {"id": i, "owner": f"owner-{i % self.owners:05d}", "balance": balance})
            for i in range(int(self.options["accounts"]))
        ]  # fmt: skip

    def plan_small(self, read: Reader) -> list[Write] | None:
        rng = self.rng
        if rng.random() < float(self.options["move_rate"]):
            old = self.accounts.choice(rng)
            if old is None or old in self.reserved:
                return None
            row = read(key_of("accounts", old))
            if row is None:
                return None
            new = self.next_account
            self.next_account += 1
            return [
                Write("accounts", key_of("accounts", old), "DELETE", None),
                Write("accounts", key_of("accounts", new), "PUT", {**row, "id": new}),
            ]
        pair = self.accounts.sample(rng, 2)
        if len(pair) < 2:
            return None
        a, b = pair
        ra, rb = read(key_of("accounts", a)), read(key_of("accounts", b))
        if ra is None or rb is None:
            return None
        amount = min(rng.randint(1, 100), ra["balance"])
        if amount <= 0:
            return None
        tid = self.next_transfer
        self.next_transfer += 1
        return [
            Write("accounts", key_of("accounts", a), "PUT", {**ra, "balance": ra["balance"] - amount}),
            Write("accounts", key_of("accounts", b), "PUT", {**rb, "balance": rb["balance"] + amount}),
            Write("transfers", key_of("transfers", tid), "PUT",
                  {"id": tid, "from_id": a, "to_id": b, "amount": amount}),
        ]  # fmt: skip

    def plan_large(self) -> LargePlan | None:
        size = int(self.options["large_size"])
        ids = [i for i in self.accounts.sample(self.rng, size) if i not in self.reserved]
        if len(ids) < 2:
            return None
        self.reserved.update(ids)
        keys = sorted(key_of("accounts", i) for i in ids)
        half = len(keys) // 2
        pool = [0]
        rng = self.rng

        def step(index: int, key: str, row: Row | None) -> Write | None:
            if row is None:
                raise Abort(f"account {key} vanished")
            if index < half:  # givers: at most a tenth of what they hold at lock time
                give = rng.randint(0, row["balance"] // 10)
                pool[0] += give
                return Write("accounts", key, "PUT", {**row, "balance": row["balance"] - give})
            receivers_left = len(keys) - index
            share = pool[0] // receivers_left if receivers_left > 1 else pool[0]
            pool[0] -= share
            return Write("accounts", key, "PUT", {**row, "balance": row["balance"] + share})

        def done() -> None:
            self.reserved.difference_update(ids)

        return LargePlan(keys, step, done)

    def on_commit(self, writes: list[Write]) -> None:
        for w, ident in _ids(writes, "accounts"):
            if w.op == "DELETE":
                self.accounts.remove(ident)
            else:
                self.accounts.add(ident)


class Orders(Workload):
    """Orders and payments: an order is paid only after it committed, and only once."""

    name = "orders"
    tables: ClassVar = {
        "orders": ("id BIGINT, customer STRING, amount BIGINT, status STRING", ("id",)),
        "payments": ("id BIGINT, order_id BIGINT, amount BIGINT", ("id",)),
    }
    views: ClassVar = {
        "order_totals": (
            "SELECT o.ordered, p.paid FROM "
            "(SELECT COALESCE(SUM(amount), 0) AS ordered FROM orders) o CROSS JOIN "
            "(SELECT COALESCE(SUM(amount), 0) AS paid FROM payments) p"
        ),
        "payment_status": (
            "SELECT o.paid_orders, p.payments, p.orphan_payments FROM "
            "(SELECT COUNT(*) AS paid_orders FROM orders WHERE status = 'paid') o CROSS JOIN "
            "(SELECT COUNT(*) AS payments, COUNT(*) - COUNT(orders.id) AS orphan_payments "
            "FROM payments LEFT JOIN orders ON payments.order_id = orders.id) p"
        ),
        "orders_by_status": (
            "SELECT status, COUNT(*) AS orders, SUM(amount) AS amount FROM orders GROUP BY status"
        ),
    }
    invariants: ClassVar = {
        "paid_le_ordered": ("order_totals", "always", "SELECT paid <= ordered FROM order_totals"),
        "one_payment_per_paid_order": (
            "payment_status",
            "always",
            "SELECT paid_orders = payments AND orphan_payments = 0 FROM payment_status",
        ),
    }
    defaults: ClassVar = {"initial_orders": 20}

    def __init__(self, rng: random.Random, options: dict[str, Any]) -> None:
        super().__init__(rng, options)
        self.open = IdPool()
        self.next_order = 0
        self.next_payment = 0

    def boundary_keys(self, expected_txns: int) -> list[str]:
        n = max(expected_txns, 10)
        return [key_of("orders", i) for i in range(n)] + [
            key_of("payments", i) for i in range(n // 3)
        ]

    def _order(self) -> Write:
        oid = self.next_order
        self.next_order += 1
        row = {"id": oid, "customer": f"customer-{self.rng.randrange(100):03d}",
               "amount": self.rng.randint(1, 500), "status": "open"}  # fmt: skip
        return Write("orders", key_of("orders", oid), "PUT", row)

    def genesis(self) -> list[Write]:
        return [self._order() for _ in range(int(self.options["initial_orders"]))]

    def plan_small(self, read: Reader) -> list[Write] | None:
        r = self.rng.random()
        if r < 0.5:
            return [self._order()]
        oid = self.open.choice(self.rng)
        if oid is None:
            return None
        row = read(key_of("orders", oid))
        if row is None or row["status"] != "open":
            return None
        if r < 0.88:
            pid = self.next_payment
            self.next_payment += 1
            return [
                Write("payments", key_of("payments", pid), "PUT",
                      {"id": pid, "order_id": oid, "amount": row["amount"]}),
                Write("orders", key_of("orders", oid), "PUT", {**row, "status": "paid"}),
            ]  # fmt: skip
        return [Write("orders", key_of("orders", oid), "DELETE", None)]

    def plan_large(self) -> LargePlan | None:
        orders = [self._order() for _ in range(int(self.options["large_size"]))]
        by_key = {w.key: w for w in orders}

        def step(index: int, key: str, row: Row | None) -> Write | None:
            if row is not None:
                raise Abort(f"order {key} exists")
            return by_key[key]

        return LargePlan(sorted(by_key), step)

    def on_commit(self, writes: list[Write]) -> None:
        for w, ident in _ids(writes, "orders"):
            if w.op == "PUT" and w.value is not None and w.value["status"] == "open":
                self.open.add(ident)
            else:
                self.open.remove(ident)


class Authors(Workload):
    """Authors and posts, with TiFlink's post-count view; no post outlives its author."""

    name = "authors"
    tables: ClassVar = {
        "authors": ("id BIGINT, first_name STRING, last_name STRING, email STRING", ("id",)),
        "posts": ("id BIGINT, author_id BIGINT, title STRING", ("id",)),
    }
    views: ClassVar = {
        "author_posts": (
            "SELECT id, first_name, last_name, email, "
            "(SELECT COUNT(*) FROM posts WHERE author_id = authors.id) AS posts FROM authors"
        ),
        "post_counts": (
            "SELECT p.total_posts, j.attributed_posts, a.authors FROM "
            "(SELECT COUNT(*) AS total_posts FROM posts) p CROSS JOIN "
            "(SELECT COUNT(*) AS attributed_posts FROM posts "
            "JOIN authors ON posts.author_id = authors.id) j CROSS JOIN "
            "(SELECT COUNT(*) AS authors FROM authors) a"
        ),
    }
    invariants: ClassVar = {
        "every_post_has_an_author": (
            "post_counts",
            "always",
            "SELECT total_posts = attributed_posts FROM post_counts",
        ),
    }
    defaults: ClassVar = {"initial_authors": 20, "initial_posts": 50}
    _FIRST: ClassVar = ("Ada", "Alan", "Grace", "Edsger", "Barbara", "Donald", "Leslie", "Frances")
    _LAST: ClassVar = ("Lovelace", "Turing", "Hopper", "Dijkstra", "Liskov", "Knuth", "Lamport")

    def __init__(self, rng: random.Random, options: dict[str, Any]) -> None:
        super().__init__(rng, options)
        self.authors = IdPool()
        self.posts = IdPool()
        self.posts_of: dict[int, dict[int, None]] = {}
        self.author_of: dict[int, int] = {}
        self.next_author = 0
        self.next_post = 0

    def boundary_keys(self, expected_txns: int) -> list[str]:
        n = max(expected_txns, 10)
        return [key_of("authors", i) for i in range(n // 6)] + [
            key_of("posts", i) for i in range(n // 2)
        ]

    def _author(self) -> Write:
        aid = self.next_author
        self.next_author += 1
        first, last = self.rng.choice(self._FIRST), self.rng.choice(self._LAST)
        row = {"id": aid, "first_name": first, "last_name": last,
               "email": f"{first.lower()}.{last.lower()}{aid}@example.com"}  # fmt: skip
        return Write("authors", key_of("authors", aid), "PUT", row)

    def _post(self, author: int) -> Write:
        pid = self.next_post
        self.next_post += 1
        row = {"id": pid, "author_id": author, "title": f"post {pid} by {author}"}
        return Write("posts", key_of("posts", pid), "PUT", row)

    def genesis(self) -> list[Write]:
        authors = [self._author() for _ in range(int(self.options["initial_authors"]))]
        ids = [w.value["id"] for w in authors if w.value]
        posts = [
            self._post(self.rng.choice(ids)) for _ in range(int(self.options["initial_posts"]))
        ]
        return authors + posts

    def plan_small(self, read: Reader) -> list[Write] | None:
        rng = self.rng
        r = rng.random()
        if r < 0.15 or not len(self.authors):
            return [self._author()]
        aid = self.authors.choice(rng)
        assert aid is not None
        akey = key_of("authors", aid)
        author = read(akey)
        if author is None:
            return None
        if r < 0.55:  # the author row is rewritten as is: it locks the author (FOR UPDATE)
            return [self._post(aid), Write("authors", akey, "PUT", author)]
        if r < 0.65:
            return [
                Write(
                    "authors",
                    akey,
                    "PUT",
                    {
                        **author,
                        "email": f"{author['first_name'].lower()}{rng.randrange(10**6)}@example.org",
                    },
                )
            ]
        if r < 0.95:
            pid = self.posts.choice(rng)
            if pid is None:
                return None
            pkey = key_of("posts", pid)
            post = read(pkey)
            if post is None:
                return None
            if r < 0.8:
                return [Write("posts", pkey, "DELETE", None)]
            if post["author_id"] == aid:
                return None
            return [
                Write("posts", pkey, "PUT", {**post, "author_id": aid}),
                Write("authors", akey, "PUT", author),
            ]
        writes = []
        for pid in sorted(self.posts_of.get(aid, {})):
            pkey = key_of("posts", pid)
            post = read(pkey)
            if post is not None and post["author_id"] == aid:
                writes.append(Write("posts", pkey, "DELETE", None))
        return [*writes, Write("authors", akey, "DELETE", None)]

    def plan_large(self) -> LargePlan | None:
        author = self._author()
        aid = author.value["id"] if author.value else 0
        writes = [author] + [self._post(aid) for _ in range(int(self.options["large_size"]))]
        by_key = {w.key: w for w in writes}

        def step(index: int, key: str, row: Row | None) -> Write | None:
            if row is not None:
                raise Abort(f"row {key} exists")
            return by_key[key]

        return LargePlan(sorted(by_key), step)

    def on_commit(self, writes: list[Write]) -> None:
        for w, ident in _ids(writes, "authors"):
            if w.op == "DELETE":
                self.authors.remove(ident)
            else:
                self.authors.add(ident)
        for w, ident in _ids(writes, "posts"):
            old = self.author_of.pop(ident, None)
            if old is not None:
                self.posts_of.get(old, {}).pop(ident, None)
            if w.op == "DELETE" or w.value is None:
                self.posts.remove(ident)
            else:
                self.posts.add(ident)
                self.author_of[ident] = w.value["author_id"]
                self.posts_of.setdefault(w.value["author_id"], {})[ident] = None


WORKLOAD_CLASSES: dict[str, type[Workload]] = {w.name: w for w in (Bank, Orders, Authors)}
