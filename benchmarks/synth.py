"""A bank-shaped input at any size: a snapshot of N accounts and M transfers, and a change
log of equal batches of transfers between random accounts (uniform over all N ids).

The simulator (``deltamv.sim``) writes every account through its log and keeps its rows
in Python, which does not reach 10M rows in a benchmark's time; this writes the snapshot
as Parquet with numpy and the log lines with f-strings. The log follows CONTRACT
section 2: two regions (accounts, then transfers), each batch one segment per region:
per transaction, PREWRITEs of the two accounts (new balances, money conserved) in
region 1 and of one new transfer in region 2, then a COMMIT in each; a RESOLVED above
the batch's last commit ends each segment. Within a batch the accounts touched are
distinct, so a batch changes exactly ``2 * per_batch`` accounts and inserts
``per_batch`` transfers. Read with ``max_segments_per_batch = 2`` a job sees one
generated batch per micro-batch.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

BASE_MS = 1_750_000_000_000
OWNERS = 1000  # groups of balance_by_owner: the same at every table size

TABLES = {
    "accounts": ("id BIGINT, owner STRING, balance BIGINT", ["id"]),
    "transfers": ("id BIGINT, from_id BIGINT, to_id BIGINT, amount BIGINT", ["id"]),
}
BANK_VIEWS = {
    "total_balance": "SELECT SUM(balance) AS total, COUNT(*) AS accounts FROM accounts",
    "balance_by_owner": (
        "SELECT owner, SUM(balance) AS balance, COUNT(*) AS accounts FROM accounts GROUP BY owner"
    ),
    "negative_accounts": "SELECT COUNT(*) AS negative FROM accounts WHERE balance < 0",
    "transfer_stats": (
        "SELECT COUNT(*) AS transfers, COALESCE(SUM(amount), 0) AS moved FROM transfers"
    ),
}
JOIN_VIEWS = {
    # a join view: each transfer with the owner of the account it came from
    "transfer_owner": (
        "SELECT t.id, t.amount, a.owner FROM transfers t JOIN accounts a ON t.from_id = a.id"
    ),
    # per-owner sums over that join
    "moved_by_owner": (
        "SELECT a.owner, COUNT(*) AS transfers, SUM(t.amount) AS moved "
        "FROM transfers t JOIN accounts a ON t.from_id = a.id GROUP BY a.owner"
    ),
}


def tso(ms: int, logical: int = 0) -> int:
    return (ms << 18) | logical


def owner_of(ids: np.ndarray) -> pa.Array:
    names = np.char.add("owner-", np.char.zfill((ids % OWNERS).astype(str), 5))
    return pa.array(names.tolist(), pa.string())


def generate(
    out: Path,
    *,
    accounts: int,
    transfers: int,
    batches: int,
    per_batch: int,
    seed: int = 5,
    views: dict[str, str] | None = None,
) -> Path:
    """Write ``out/snapshot``, ``out/changelog`` and ``out/config.toml`` (cached by args)."""
    args = dict(accounts=accounts, transfers=transfers, batches=batches, per_batch=per_batch,
                seed=seed, views=views or {**BANK_VIEWS, **JOIN_VIEWS})  # fmt: skip
    stamp = out / "synth-args.json"
    wanted = json.dumps(args, sort_keys=True)
    if stamp.exists() and stamp.read_text() == wanted:
        return out
    shutil.rmtree(out, ignore_errors=True)
    (out / "snapshot" / "accounts").mkdir(parents=True)
    (out / "snapshot" / "transfers").mkdir(parents=True)
    rng = np.random.default_rng(seed)
    balance = np.full(accounts, 1000, dtype=np.int64)
    chunk = 1_000_000
    for n, at in enumerate(range(0, accounts, chunk)):
        ids = np.arange(at, min(accounts, at + chunk), dtype=np.int64)
        table = pa.table({"id": ids, "owner": owner_of(ids), "balance": balance[ids]})
        pq.write_table(table, out / "snapshot" / "accounts" / f"part-{n:04d}.parquet")
    for n, at in enumerate(range(0, transfers, chunk)):
        size = min(transfers, at + chunk) - at
        table = pa.table({
            "id": np.arange(at, at + size, dtype=np.int64),
            "from_id": rng.integers(0, accounts, size, dtype=np.int64),
            "to_id": rng.integers(0, accounts, size, dtype=np.int64),
            "amount": np.zeros(size, dtype=np.int64),  # keeps the balances consistent
        })  # fmt: skip
        pq.write_table(table, out / "snapshot" / "transfers" / f"part-{n:04d}.parquet")
    (out / "snapshot" / "_snapshot.json").write_text(json.dumps({"ts": tso(BASE_MS)}))

    regions = {1: ("", "transfers/"), 2: ("transfers/", "")}
    for region, (start, end) in regions.items():
        folder = out / "changelog" / f"region-{region}"
        folder.mkdir(parents=True)
        head = [
            json.dumps({"region": region, "type": "INITIALIZED", "start_key": start,
                        "end_key": end}),
            json.dumps({"region": region, "type": "RESOLVED", "ts": tso(BASE_MS)}),
        ]  # fmt: skip
        (folder / "00000000.jsonl").write_text("\n".join(head) + "\n")
    next_transfer = transfers
    for b in range(batches):
        ms = BASE_MS + 1000 * (b + 1)
        pairs = rng.choice(accounts, size=2 * per_batch, replace=False).reshape(-1, 2)
        amounts = rng.integers(1, 100, per_batch)
        r1: list[str] = []
        r2: list[str] = []
        for j in range(per_batch):
            a, c = int(pairs[j, 0]), int(pairs[j, 1])
            amount = int(amounts[j])
            balance[a] -= amount
            balance[c] += amount
            start, commit = tso(ms, 2 * j + 1), tso(ms, 2 * j + 2)
            t = next_transfer
            next_transfer += 1
            ka, kc, kt = f"accounts/{a:010d}", f"accounts/{c:010d}", f"transfers/{t:010d}"
            for ident, key in ((a, ka), (c, kc)):
                r1.append(
                    f'{{"region":1,"type":"PREWRITE","start_ts":{start},"table":"accounts",'
                    f'"key":"{key}","op":"PUT","value":{{"id":{ident},'
                    f'"owner":"owner-{ident % OWNERS:05d}","balance":{int(balance[ident])}}},'
                    f'"primary":"{ka}"}}'
                )
            r1.append(
                f'{{"region":1,"type":"COMMIT","start_ts":{start},"commit_ts":{commit},'
                f'"table":"accounts","key":"{ka}"}}'
            )
            r2.append(
                f'{{"region":2,"type":"PREWRITE","start_ts":{start},"table":"transfers",'
                f'"key":"{kt}","op":"PUT","value":{{"id":{t},"from_id":{a},"to_id":{c},'
                f'"amount":{amount}}},"primary":"{ka}"}}'
            )
            r2.append(
                f'{{"region":2,"type":"COMMIT","start_ts":{start},"commit_ts":{commit},'
                f'"table":"transfers","key":"{kt}"}}'
            )
        resolved = tso(ms + 999)
        for region, lines in ((1, r1), (2, r2)):
            lines.append(f'{{"region":{region},"type":"RESOLVED","ts":{resolved}}}')
            path = out / "changelog" / f"region-{region}" / f"{b + 1:08d}.jsonl"
            path.write_text("\n".join(lines) + "\n")
    _write_config(out, args["views"])
    stamp.write_text(wanted)
    return out


def _write_config(out: Path, views: dict[str, Any]) -> None:
    lines = ['[job]', 'name = "synth"', 'changelog = "changelog"', 'snapshot = "snapshot"',
             'checkpoint = "out/_checkpoint"']  # fmt: skip
    for name, (schema, key) in TABLES.items():
        lines += ["", f"[tables.{name}]", f"schema = {json.dumps(schema)}",
                  f"primary_key = {json.dumps(key)}"]  # fmt: skip
    for name, sql in views.items():
        lines += ["", f"[views.{name}]", f"sql = {json.dumps(sql)}",
                  f'path = "out/views/{name}"']  # fmt: skip
    (out / "config.toml").write_text("\n".join(lines) + "\n")
