"""Fixed sequences for bugs the differential tests found; each is checked against Spark."""

from __future__ import annotations

from collections import Counter
from decimal import Decimal
from typing import Any

import pytest
from pyspark.sql import SparkSession

from deltamv.compute import Compute
from deltamv.views.ivm import AggregateOp, JoinOp, ScanOp

from .harness import Planned, Run, spark_check
from .shapes import SHAPES
from .strategies import COLUMNS


def _account(key: int, **values: Any) -> dict[str, Any]:
    return {"id": key, **dict.fromkeys(COLUMNS["accounts"]), **values}


def _transfer(key: int, **values: Any) -> dict[str, Any]:
    return {"id": key, **dict.fromkeys(COLUMNS["transfers"]), **values}


def _the(run: Run, view: str, kind: type, **where: Any) -> Any:
    """The one operator of ``kind`` in ``view``'s plan (with the attribute values ``where``)."""
    (op,) = [o for o in run.views[view].ops()
             if isinstance(o, kind) and all(getattr(o, k) == v for k, v in where.items())]  # fmt: skip
    return op


def _count_reads(monkeypatch: pytest.MonkeyPatch, op: Any) -> list[int]:
    """The rows each of ``op``'s lookups returns, in order, from now on."""
    reads: list[int] = []
    real = op.lookup

    def spy(*args: Any, **kwargs: Any) -> Any:
        rows = real(*args, **kwargs)
        reads.append(rows.num_rows)
        return rows

    monkeypatch.setattr(op, "lookup", spy)
    return reads


def test_join_on_a_null_safe_and_a_strict_key_matches_null_on_the_null_safe_one(
    spark: SparkSession, planned: Planned, compute: Compute
) -> None:
    # A mirror lookup by (src, owner) used to compare every column strictly as soon as
    # one key was strict, so a NULL owner never found its <=> match.
    views = ["join_mixed_keys", "full_join_nullsafe"]
    run = Run(planned, views, compute)
    try:
        run.load({"accounts": [_account(1), _account(2, owner="a")], "transfers": []})
        run.step([("transfers", 7, _transfer(7, src=1)), ("transfers", 8, _transfer(8, src=2))])
        assert run.outputs["join_mixed_keys"] == Counter({(7, 1): 1})
        assert run.outputs["full_join_nullsafe"] == Counter({(1, 7): 1, (2, None): 1, (None, 8): 1})
        run.step([("accounts", 1, None)])
        assert run.outputs["join_mixed_keys"] == Counter()
        assert spark_check(spark, run, SHAPES) == 2 * 3
    finally:
        run.close()


def test_a_global_aggregate_folded_to_no_aggregate_is_one_row_over_any_input(
    spark: SparkSession, planned: Planned, compute: Compute
) -> None:
    # Spark's plan of COALESCE(5, MAX(balance)) keeps no aggregate; its evaluation in
    # DuckDB, a projection then, gave a row per input row: none over empty input, and
    # the view stayed empty (an edge case found by a job-level -0.0 test).
    run = Run(planned, ["global_folded"], compute)
    try:
        assert _the(run, "global_folded", AggregateOp).calls == []
        run.load({"accounts": [], "transfers": []})
        assert run.outputs["global_folded"] == Counter({(5,): 1})
        run.step([("accounts", 1, _account(1)), ("accounts", 2, _account(2, balance=3))])
        assert run.outputs["global_folded"] == Counter({(5,): 1})
        run.step([("accounts", 1, None), ("accounts", 2, None)])
        assert run.outputs["global_folded"] == Counter({(5,): 1})
        assert spark_check(spark, run, SHAPES) == 3
    finally:
        run.close()


def test_avg_of_decimal_in_full_evaluation_and_recomputed_groups(
    spark: SparkSession, planned: Planned, compute: Compute
) -> None:
    # The full evaluation (the view's first version) refused AVG of a DECIMAL; it now
    # rounds as Spark does: half up to the division's scale, then to the result's.
    run = Run(planned, ["by_owner_region", "total_dec"], compute)
    credits = ["0.01", "0.01", "0.00", "-0.01", "-0.01", "10.01"]
    rows = [
        _account(i, owner="a" if i < 3 else "b", region=1, credit=Decimal(c), active=True)
        for i, c in enumerate(credits)
    ]
    try:
        run.load({"accounts": rows, "transfers": []})
        averages = {row[0]: row[3] for row in run.outputs["by_owner_region"]}
        assert averages == {"a": Decimal("0.006667"), "b": Decimal("3.330000")}
        run.step([("accounts", 5, None)])
        averages = {row[0]: row[3] for row in run.outputs["by_owner_region"]}
        assert averages == {"a": Decimal("0.006667"), "b": Decimal("-0.010000")}
        run.step([("accounts", 4, _account(4, owner="b", region=1, credit=Decimal("0.00")))])
        averages = {row[0]: row[3] for row in run.outputs["by_owner_region"]}
        assert averages == {"a": Decimal("0.006667"), "b": Decimal("-0.005000")}
        assert spark_check(spark, run, SHAPES) == 2 * 3
    finally:
        run.close()


def test_avg_of_a_small_decimal_rounds_through_a_double_as_spark_does(
    spark: SparkSession, planned: Planned, compute: Compute
) -> None:
    # Spark computes AVG of a DECIMAL(p <= 11) in DOUBLE (its DecimalAggregates rule):
    # 0.07 over 160 rows is 0.00043749999999999995 there, so 0.000437, where the exact
    # quotient 0.0004375 rounds half up to 0.000438 (found by an outside check).
    run = Run(planned, ["by_owner_region", "total_dec"], compute)
    rows = [
        _account(i, owner="a", region=1, credit=Decimal("0.07" if i == 0 else "0.00"), active=True)
        for i in range(160)
    ]
    try:
        run.load({"accounts": rows, "transfers": []})  # full evaluation (DuckDB)
        averages = {row[0]: row[3] for row in run.outputs["by_owner_region"]}
        assert averages == {"a": Decimal("0.000437")}
        run.step([("accounts", 5, None)])
        run.step([("accounts", 5, _account(5, owner="a", region=1, credit=Decimal("0.00")))])
        averages = {row[0]: row[3] for row in run.outputs["by_owner_region"]}
        assert averages == {"a": Decimal("0.000437")}  # from the kept sums
        assert spark_check(spark, run, SHAPES) == 2 * 3
    finally:
        run.close()


def test_a_change_the_filter_below_an_aggregate_drops_leaves_its_state_untouched(
    spark: SparkSession, planned: Planned, compute: Compute, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The filter runs inside the aggregate's query: a batch whose changed rows it drops
    # changes no group, so the view has no change and its state is not written.
    views = ["negative", "total_dec", "having_sum"]
    run = Run(planned, views, compute)
    writes: Counter[str] = Counter()
    for view in views:
        for op in run.views[view].ops():
            if isinstance(op, AggregateOp) and op.state is not None:
                for method in ("insert", "delete"):
                    real = getattr(op.state, method)

                    def spy(*args: Any, _view: str = view, _real: Any = real) -> Any:
                        writes[_view] += 1
                        return _real(*args)

                    monkeypatch.setattr(op.state, method, spy)
    try:
        run.load({"accounts": [_account(1, balance=-5, region=1, active=True,
                                        credit=Decimal("1.50")),
                               _account(2, balance=7, region=2)], "transfers": []})  # fmt: skip
        writes.clear()
        # account 3 is neither negative nor active, before and after
        run.step([("accounts", 3, _account(3, balance=4)),
                  ("accounts", 3, _account(3, balance=9, active=False))])  # fmt: skip
        assert run.outputs["negative"] == Counter({(1,): 1})
        # having_sum has no filter below its aggregate: its NULL-region group is new
        assert writes == Counter({"having_sum": 2})
        run.step([("accounts", 2, _account(2, balance=-1, region=2, active=True))])
        assert run.outputs["negative"] == Counter({(2,): 1})
        assert writes["negative"] == 2 and writes["total_dec"] == 2
        assert spark_check(spark, run, SHAPES) == len(views) * 3
    finally:
        run.close()


def test_a_kept_min_reads_its_group_only_when_no_row_holds_it_any_more(
    spark: SparkSession, planned: Planned, compute: Compute, monkeypatch: pytest.MonkeyPatch
) -> None:
    # MIN/MAX keep each group's extreme and how many rows hold it: a batch that leaves a
    # row holding it (a tie) reads nothing; one that takes the last one away reads the
    # group's rows (every touched group was read whole at every batch before).
    views = ["minmax"]
    run = Run(planned, views, compute)
    op = _the(run, "minmax", AggregateOp)
    reads = _count_reads(monkeypatch, op.child)
    try:
        run.load({"accounts": [_account(1, owner="a", balance=0), _account(2, owner="a", balance=0),
                               _account(3, owner="a", balance=5), _account(4, owner="b", balance=9)],
                  "transfers": []})  # fmt: skip
        run.step([("accounts", 1, _account(1, owner="a", balance=3))])  # a tie at 0 is left
        run.step([("accounts", 4, _account(4, owner="b", balance=1)),  # new MIN, MAX gone
                  ("accounts", 5, _account(5, owner="b", balance=2))])  # fmt: skip
        assert run.outputs["minmax"] == Counter({("a", 0, 5): 1, ("b", 1, 2): 1})
        assert reads == [2]  # group b's MAX: its two rows read, once
        run.step([("accounts", 2, None)])  # the last 0 of group a leaves: a is read
        assert run.outputs["minmax"] == Counter({("a", 3, 5): 1, ("b", 1, 2): 1})
        assert reads == [2, 2]
        assert spark_check(spark, run, SHAPES) == len(views) * 4
    finally:
        run.close()


def test_a_global_min_reads_its_next_value_from_its_counts_in_order(
    spark: SparkSession, compute: Compute, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A global MIN/MAX has no group to read again: it keeps every value's count, ordered
    # (decimals by a text that orders as the numbers: "-0.01" < "-2.25" as text). When
    # the extreme's last row leaves, the first values stored are read, one more than
    # the batch emptied; the input is never read.
    from .shapes import TABLES

    views = {"low": "SELECT MIN(balance) AS mb, MIN(credit) AS mc, MAX(credit) AS xc"
                    " FROM accounts"}  # fmt: skip
    run = Run(Planned.of(spark, TABLES, views, tmp_path), ["low"], compute)
    op = _the(run, "low", AggregateOp)
    assert op.ordered and op.value_counts[1] is op.value_counts[2]  # MIN, MAX of credit
    limits: list[int] = []
    real = type(op.value_counts[1]).first

    def first(table: Any, *args: Any, limit: int, **kwargs: Any) -> Any:
        limits.append(limit)
        return real(table, *args, limit=limit, **kwargs)

    def no_read(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the input was read")

    monkeypatch.setattr(type(op.value_counts[1]), "first", first)
    monkeypatch.setattr(op.child, "lookup", no_read)
    credit = [Decimal(c) for c in ("-2.25", "-0.01", "-1.00", "-0.50", "-0.25", "-0.10")]
    balance = (0, 0, 5, 9, 7, 8)
    try:
        run.load({"accounts": [_account(k + 1, balance=b, credit=c)
                               for k, (b, c) in enumerate(zip(balance, credit, strict=True))],
                  "transfers": []})  # fmt: skip
        run.step([("accounts", 1, _account(1, balance=3, credit=credit[0]))])  # a tie at 0
        assert run.outputs["low"] == Counter({(0, Decimal("-2.25"), Decimal("-0.01")): 1})
        assert limits == []
        run.step([("accounts", 2, None),  # the last 0 and the greatest credit leave
                  ("accounts", 1, _account(1, balance=3, credit=Decimal("-0.75")))])  # fmt: skip
        # MIN(balance): 0 emptied, two read; MIN(credit): -2.25 and -0.01 emptied, three
        # read (in the text's order: -0.01, -0.10, -0.25, wrong); MAX(credit): three too
        assert run.outputs["low"] == Counter({(3, Decimal("-1.00"), Decimal("-0.10")): 1})
        assert sorted(limits) == [2, 3, 3]
        run.step([("accounts", 1, _account(1, balance=10, credit=Decimal("-0.75")))])
        # only MIN(balance) left its value: the credits' counts are not read
        assert run.outputs["low"] == Counter({(5, Decimal("-1.00"), Decimal("-0.10")): 1})
        assert sorted(limits) == [2, 2, 3, 3]
        run.step([("accounts", k, None) for k in (1, 3, 4, 5, 6)])  # the input emptied
        assert run.outputs["low"] == Counter({(None, None, None): 1})
        assert spark_check(spark, run, views) == len(views) * 5
    finally:
        run.close()


# Found by an outside check of expression semantics (incremental against Spark).
GUARDED = {
    # AND / OR outside a filter: Spark evaluates the right side only where the left side
    # does not decide; DuckDB evaluated both, and failed on the division by zero
    "guarded_logic": "SELECT id, (region <> 0 AND 10 DIV region > 1) AS a,"
    " (region = 0 OR 10 DIV region > 1) AS o,"
    " (region IS NULL OR (region <> 0 AND 10 DIV region > 4)) AS n FROM accounts",
    # an aggregate's argument only on the rows its FILTER keeps: the linear state, and a
    # group recomputed (MAX), from the first full evaluation on
    # (each failing argument once per view: Spark evaluates one that several aggregates
    # share, as a common subexpression, on every row)
    "guarded_sum": "SELECT owner, SUM(10 DIV region) FILTER (WHERE region <> 0) AS s,"
    " COUNT(balance) FILTER (WHERE region <> 0) AS c FROM accounts GROUP BY owner",
    "guarded_max": "SELECT owner, MAX(balance) FILTER (WHERE region <> 0 AND 10 DIV region > 1)"
    " AS m, SUM(100 DIV region) FILTER (WHERE region <> 0) AS s FROM accounts GROUP BY owner",
    # 2^63 as a double: Spark's range check passes it, the cast saturates
    "cast_to_long": "SELECT id, CAST(rate AS BIGINT) AS l FROM accounts",
}


def test_a_side_that_fails_is_evaluated_only_where_spark_evaluates_it(
    spark: SparkSession, compute: Compute, tmp_path: Any
) -> None:
    from .shapes import TABLES

    planned = Planned.of(spark, TABLES, GUARDED, tmp_path)
    run = Run(planned, sorted(GUARDED), compute)
    try:
        run.load({"accounts": [_account(1, owner="a", region=0, balance=3, rate=1.0),
                               _account(2, owner="a", region=5, balance=4, rate=2.0**63),
                               _account(3, owner="b", region=0, balance=5, rate=-(2.0**63))],
                  "transfers": []})  # fmt: skip
        assert run.outputs["cast_to_long"] == Counter(
            {(1, 1): 1, (2, 2**63 - 1): 1, (3, -(2**63)): 1}
        )
        assert run.outputs["guarded_sum"] == Counter({("a", 2, 1): 1, ("b", None, 0): 1})
        run.step([("accounts", 4, _account(4, owner="b", region=0, balance=9, rate=0.5)),
                  ("accounts", 5, _account(5, owner="b", region=2, balance=8, rate=-0.5)),
                  ("accounts", 2, None)])  # fmt: skip
        assert run.outputs["guarded_logic"] == Counter({
            (1, False, True, False): 1, (3, False, True, False): 1,
            (4, False, True, False): 1, (5, True, True, True): 1,
        })  # fmt: skip
        assert run.outputs["guarded_max"] == Counter({("a", None, None): 1, ("b", 8, 50): 1})
        run.step([("accounts", 6, _account(6, owner="c", region=None, balance=1))])
        assert spark_check(spark, run, GUARDED) == len(GUARDED) * 3
    finally:
        run.close()


# Found by a search of view SQL against Spark: NULL divided by 0 is NULL in Spark's ANSI
# mode (it looks at the dividend before it fails), and the maintenance failed on it.
NULL_BY_ZERO = {
    "null_quotients": "SELECT id, region DIV balance AS q, region % balance AS r,"
    " region / balance AS d FROM accounts WHERE region IS NULL OR balance <> 0",
    "null_quotient_sums": "SELECT owner, SUM(region DIV balance) AS s, COUNT(*) AS n"
    " FROM accounts WHERE region IS NULL OR balance <> 0 GROUP BY owner",
    # an account without transfers: the padded amount divided by a balance of 0
    "padded_quotient": "SELECT a.id, t.amount DIV a.balance AS q FROM accounts a"
    " LEFT JOIN transfers t ON t.src = a.id WHERE t.id IS NULL",
}


def test_null_divided_by_zero_is_null(spark: SparkSession, compute: Compute, tmp_path: Any) -> None:
    from .shapes import TABLES

    planned = Planned.of(spark, TABLES, NULL_BY_ZERO, tmp_path)
    run = Run(planned, sorted(NULL_BY_ZERO), compute)
    try:
        run.load({"accounts": [_account(1, owner="a", balance=0),
                               _account(2, owner="a", region=6, balance=4)],
                  "transfers": []})  # fmt: skip
        run.step([("accounts", 3, _account(3, owner="b", balance=0)),
                  ("transfers", 9, _transfer(9, src=2, amount=5))])  # fmt: skip
        assert run.outputs["null_quotients"] == Counter(
            {(1, None, None, None): 1, (2, 1, 2, 1.5): 1, (3, None, None, None): 1}
        )
        assert run.outputs["null_quotient_sums"] == Counter({("a", 1, 2): 1, ("b", None, 1): 1})
        assert run.outputs["padded_quotient"] == Counter({(1, None): 1, (3, None): 1})
        run.step([("accounts", 1, None), ("transfers", 9, None)])
        assert run.outputs["padded_quotient"] == Counter({(2, None): 1, (3, None): 1})
        assert spark_check(spark, run, NULL_BY_ZERO) == len(NULL_BY_ZERO) * 3
    finally:
        run.close()


def test_min_and_max_kept_in_order_stale_in_different_groups_of_one_batch(
    spark: SparkSession, planned: Planned, compute: Compute
) -> None:
    # Of MIN and MAX by a computed key, each stale in its own groups in one batch: the
    # MIN's groups were read again first, by a join that may give the states in another
    # order, and the MAX's stale flags were then applied to the wrong groups (a MAX of
    # NULL; found by the differential tests).
    run = Run(planned, ["extremes_double_computed"], compute)
    try:
        run.load({"accounts": [], "transfers": []})
        run.step([("accounts", 0, _account(0)), ("accounts", 2, _account(2, region=2, rate=float("-inf"))),
                  ("accounts", 4, _account(4, region=1, rate=0.0)),
                  ("accounts", 1, _account(1, region=1, rate=2.25))])  # fmt: skip
        run.step([("accounts", 1, None), ("accounts", 2, _account(2, region=2, rate=0.0)),
                  ("accounts", 4, _account(4, region=1, rate=1.5))])  # fmt: skip
        assert run.outputs["extremes_double_computed"] == Counter(
            {(0, 0.0, 0.0): 1, (1, 1.5, 1.5): 1, (None, None, None): 1}
        )
        assert spark_check(spark, run, SHAPES) == 3
    finally:
        run.close()


def test_a_changed_row_of_an_outer_joins_preserved_side_reads_no_other_row_of_its_key(
    spark: SparkSession, planned: Planned, compute: Compute, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The padded rows of ``transfers t LEFT JOIN accounts a ON t.dst = a.id`` change only
    # where an account with transfers comes or goes; a new transfer is padded or not by
    # its own account. Every transfer to the same account was read, before and after, at
    # each new one (an outside check: at 10M rows, 2M rows read for 5,000 changed).
    views = ["global_join_agg"]
    run = Run(planned, views, compute)
    join = _the(run, "global_join_agg", JoinOp)
    reads = _count_reads(monkeypatch, join.left)
    try:
        run.load({"accounts": [_account(1), _account(2)],
                  "transfers": [_transfer(i, dst=1) for i in (10, 11, 12)]})  # fmt: skip
        run.step([("transfers", 13, _transfer(13, dst=1)), ("transfers", 14, _transfer(14, dst=3))])
        assert run.outputs["global_join_agg"] == Counter({(5, 4): 1})
        assert sum(reads) == 0
        run.step([("accounts", 1, None)])  # its four transfers lose their match: read
        assert run.outputs["global_join_agg"] == Counter({(5, 0): 1})
        assert reads == [4, 4]  # the pairs it leaves, then the padded rows it leaves
        run.step([("accounts", 3, _account(3))])  # transfer 14 finds its account
        assert run.outputs["global_join_agg"] == Counter({(5, 1): 1})
        assert spark_check(spark, run, SHAPES) == len(views) * 4
    finally:
        run.close()


@pytest.mark.parametrize("view", ["left_join", "semi_in", "anti_exists"])
def test_whether_a_key_has_partners_is_read_from_the_index_not_from_the_partners(
    spark: SparkSession, planned: Planned, compute: Compute, monkeypatch: pytest.MonkeyPatch,
    view: str,
) -> None:  # fmt: skip
    # Accounts padded or kept by their transfers: a new transfer of an account that has
    # some, or a changed account, decides nothing, and which accounts gained their first
    # transfer or lost their last is known from the mirror's index, read for one entry a
    # key or one more than the batch takes from it. All the transfers of the keys
    # touched were read, before and after (an outside check: a branch's whole history
    # at each pgbench transaction).
    run = Run(planned, [view], compute)
    scan = _the(run, view, ScanOp, table="transfers")
    reads = _count_reads(monkeypatch, scan)  # rows of transfers, read from its mirror
    upto: list[int] = []
    real = scan.mirror.counts

    def counts(*args: Any, **kwargs: Any) -> Any:
        upto.append(kwargs["upto"])
        return real(*args, **kwargs)

    monkeypatch.setattr(scan.mirror, "counts", counts)
    key = "dst" if view == "left_join" else "src"
    try:
        run.load({"accounts": [_account(1, balance=5), _account(2, balance=6)],
                  "transfers": [_transfer(i, **{key: 1}) for i in (10, 11, 12)]})  # fmt: skip
        run.step([("transfers", 13, _transfer(13, **{key: 1})),
                  ("accounts", 1, _account(1, balance=7))])  # fmt: skip
        run.step([("transfers", 14, _transfer(14, **{key: 2}))])  # account 2's first
        run.step([("transfers", 15, _transfer(15, **{key: None}))])  # no account's
        run.step([("transfers", 14, None)])  # account 2's last
        run.step([("transfers", 10, None), ("transfers", 11, None)])  # two of four leave
        assert reads == []
        assert upto[-1] == 3  # two taken from account 1: three entries at most
        assert upto.count(2) == 1  # account 2's one taken
        assert spark_check(spark, run, SHAPES) == 6
    finally:
        run.close()


def test_a_filtered_side_is_read_once_for_whether_a_key_has_matches_before_and_after(
    spark: SparkSession, planned: Planned, compute: Compute, monkeypatch: pytest.MonkeyPatch
) -> None:
    # EXISTS (... t.dst = a.id AND t.amount > 10): the filter is not implied by the key's
    # match, so the index cannot answer; the rows before the batch are read once and
    # the state after is those plus the batch's change (it read them before and after).
    run = Run(planned, ["semi_exists"], compute)
    scan = _the(run, "semi_exists", ScanOp, table="transfers")
    reads = _count_reads(monkeypatch, scan)
    try:
        run.load({"accounts": [_account(1), _account(2)],
                  "transfers": [_transfer(i, dst=1, amount=20) for i in (10, 11, 12)]})  # fmt: skip
        run.step([("transfers", 13, _transfer(13, dst=1, amount=30))])
        assert reads == [3]
        run.step([("transfers", i, None) for i in (10, 11, 12, 13)])  # account 1's last
        assert run.outputs["semi_exists"] == Counter()
        assert reads == [3, 4]
        assert spark_check(spark, run, SHAPES) == 3
    finally:
        run.close()
