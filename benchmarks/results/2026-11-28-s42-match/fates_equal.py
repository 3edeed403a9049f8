"""The transaction fates and rule violations of the tree before (DuckDB over every
transaction) against this one's (Arrow; the rules over the transactions that may break
one), on random events.

    OLD=<worktree of the commit before>/src/deltamv/pipeline/match.py \\
        PYTHONPATH=src .venv/bin/python benchmarks/results/2026-11-28-s42-match/fates_equal.py

``fcommit`` is compared where the first finishing event is a COMMIT, the only place it is
read (DuckDB's ``arg_min`` skips a ROLLBACK's NULL commit ts and takes a later one's).
"""

import importlib.util
import os
import random
import sys

import pyarrow as pa

import deltamv.pipeline.match as new_match
from deltamv.compute import Compute

spec = importlib.util.spec_from_file_location("old_match", os.environ["OLD"])
assert spec is not None and spec.loader is not None
old_match = importlib.util.module_from_spec(spec)
sys.modules["old_match"] = old_match  # (its dataclasses look their module up)
spec.loader.exec_module(old_match)

COLUMNS = ["region", "start_ts", "prewrites", "fev", "ftype", "fcommit", "prior", "prior_commit"]


def rows(fates: pa.Table) -> list[tuple[object, ...]]:
    out = []
    for row in zip(*[fates[c].to_pylist() for c in COLUMNS], strict=True):
        values = list(row)
        if values[4] != "COMMIT":
            values[5] = "-"
        out.append(tuple(values))
    return sorted(out, key=repr)


def events(rng: random.Random, legal: bool) -> pa.Table:
    """Random events; ``legal``: each transaction's PREWRITEs, then its COMMITs at one commit
    ts or its ROLLBACKs (one a key, or sent again), and one event in ten of any kind
    anywhere."""
    if legal:
        kinds: list[tuple[int, int, str, int | None]] = []
        for start_ts in range(1, rng.randint(1, 8)):
            region = rng.randint(1, 3)
            kinds += [(region, start_ts, "PREWRITE", None)] * rng.randint(0, 3)
            end = rng.choice(["COMMIT", "COMMIT", "ROLLBACK", None])
            again = rng.randint(1, 3)  # one a key, or sent again
            if end == "COMMIT":
                kinds += [(region, start_ts, "COMMIT", start_ts + 10)] * again
            elif end == "ROLLBACK":
                kinds += [(region, start_ts, "ROLLBACK", None)] * again
        for _ in range(len(kinds) // 10):
            kind = rng.choice(["PREWRITE", "COMMIT", "ROLLBACK"])
            at = rng.randint(0, len(kinds))
            ts = rng.randint(9, 20) if kind == "COMMIT" else None
            kinds.insert(at, (rng.randint(1, 3), rng.randint(1, 8), kind, ts))
    else:
        kinds = []
        for _ in range(rng.randint(0, 60)):
            kind = rng.choice(["PREWRITE"] * 3 + ["COMMIT", "ROLLBACK"])
            ts = rng.choice([9, 10]) if kind == "COMMIT" else None
            kinds.append((rng.randint(1, 3), rng.randint(1, 8), kind, ts))
    n = len(kinds)
    return pa.table({
        "ev": pa.array(sorted(rng.sample(range(400), n)), pa.int64()),
        "region": pa.array([k[0] for k in kinds], pa.int64()),
        "type": pa.array([k[2] for k in kinds], pa.string()),
        "start_ts": pa.array([k[1] for k in kinds], pa.int64()),
        "commit_ts": pa.array([k[3] for k in kinds], pa.int64()),
        "table": pa.array(["t"] * n, pa.string()),
        "key": pa.array(["k"] * n, pa.string()),
    })  # fmt: skip


def main() -> None:
    compute = Compute()
    rng = random.Random(5)
    violations = 0
    for trial in range(6000):
        e = events(rng, legal=trial % 2 == 1)
        txns = set(zip(e["region"].to_pylist(), e["start_ts"].to_pylist(), strict=True))
        finished = [t for t in sorted(txns) if rng.random() < 0.2]
        prior = pa.table({
            "region": pa.array([t[0] for t in finished], pa.int64()),
            "start_ts": pa.array([t[1] for t in finished], pa.int64()),
            "commit_ts": pa.array([rng.choice([None, 10]) for _ in finished], pa.int64()),
        })  # fmt: skip
        old = compute.query(old_match._FATES_SQL, e=e, prior=prior)
        new = new_match._fates(e, prior)
        assert rows(old) == rows(new), trial
        before = compute.query(old_match._TXN_RULES_SQL, e=e, f=old).to_pylist()[:1]
        suspects = new.filter(new.column("may_break"))
        now = (
            compute.query(new_match._TXN_RULES_SQL, e=e, f=suspects).to_pylist()[:1]
            if suspects.num_rows
            else []
        )
        assert before == now, (trial, before, now)
        violations += bool(before)
    print(
        f"6000 random event sets (half of them legal but for one event in ten): the same fates and first violation ({violations} had one)"
    )


if __name__ == "__main__":
    main()
