"""The SQL shapes the differential tests maintain, over two small tables.

``accounts`` and ``transfers`` are the only table names in the shapes (the Spark oracle
renames them per random database state), and no alias or column reuses those words.
Each shape names the cases of DESIGN.md ("Incremental maintenance") it is there for.
"""

from __future__ import annotations

ACCOUNTS = (
    "id BIGINT, owner STRING, region INT, balance BIGINT, credit DECIMAL(10,2),"
    " opened DATE, seen TIMESTAMP, active BOOLEAN, rate DOUBLE"
)
TRANSFERS = (
    "id BIGINT, src BIGINT, dst BIGINT, owner STRING, amount BIGINT, fee DECIMAL(12,3), day DATE,"
    " rate DOUBLE"
)
TABLES = {"accounts": (ACCOUNTS, ("id",)), "transfers": (TRANSFERS, ("id",))}

# name -> SQL; every one of them is maintained incrementally.
SHAPES: dict[str, str] = {
    # global aggregates: one row over empty input, SUM over only NULLs, COUNT(col) vs (*)
    "total": "SELECT SUM(balance) AS total, COUNT(*) AS n, COUNT(balance) AS nb,"
    " AVG(balance) AS av FROM accounts",
    "total_dec": "SELECT SUM(credit) AS s, AVG(credit) AS av, COUNT(credit) AS nc"
    " FROM accounts WHERE active",
    "negative": "SELECT COUNT(*) AS negative FROM accounts WHERE balance < 0",
    # a global aggregate Spark folds to no aggregate at all (COALESCE of a literal):
    # still one row, over empty input and over many rows
    "global_folded": "SELECT COALESCE(5, MAX(balance)) AS five FROM accounts",
    # an expression over a global aggregate (the demo's transfer totals)
    "moved": "SELECT COUNT(*) AS n, COALESCE(SUM(amount), 0) AS moved FROM transfers",
    # NULL group keys; groups emptied and re-created; zero-sum groups; AVG of BIGINT
    "by_owner": "SELECT owner, SUM(balance) AS s, COUNT(*) AS n, COUNT(balance) AS nb,"
    " AVG(balance) AS av FROM accounts GROUP BY owner",
    # a group key and a filter through Spark's case mapping (a DuckDB function of
    # deltamv's), over NULLs: lower(NULL) <> 'b' keeps no row, OR IS NULL does
    "by_upper": "SELECT upper(owner) AS u, COUNT(*) AS n, SUM(balance) AS s FROM accounts"
    " WHERE lower(owner) <> 'b' OR owner IS NULL GROUP BY upper(owner)",
    # UNION ALL: rows of both tables by position (INT and BIGINT widened), one filtered;
    # a row of each table with equal values counts twice
    "union_all": "SELECT owner, region AS v FROM accounts WHERE balance > 0"
    " UNION ALL SELECT owner, amount FROM transfers",
    # an aggregate over a union: MAX kept per group, groups of both tables' rows
    "union_agg": "SELECT owner, COUNT(*) AS n, SUM(v) AS s, MAX(v) AS mx FROM (SELECT owner,"
    " balance AS v FROM accounts UNION ALL SELECT owner, amount AS v FROM transfers) u"
    " GROUP BY owner",
    # UNION (distinct): Spark's aggregate over the union; NULL owners one row
    "union_distinct": "SELECT owner FROM accounts UNION SELECT owner FROM transfers",
    # a join probing a union of one table with itself (each transfer's two accounts)
    "union_join": "SELECT u.side, a.id, a.balance FROM (SELECT src AS k, 'src' AS side"
    " FROM transfers UNION ALL SELECT dst AS k, 'dst' AS side FROM transfers) u"
    " JOIN accounts a ON a.id = u.k",
    # two NULL-able group keys; DECIMAL SUM and AVG; SUM of INT
    "by_owner_region": "SELECT owner, region, SUM(credit) AS s, AVG(credit) AS av,"
    " SUM(region) AS sr, COUNT(*) AS n FROM accounts GROUP BY owner, region",
    # a computed group key; FILTER clauses
    "by_sign": "SELECT balance % 3 AS m, COUNT(*) AS n,"
    " COUNT(*) FILTER (WHERE active) AS na, SUM(balance) FILTER (WHERE region > 1) AS sf"
    " FROM accounts GROUP BY balance % 3",
    # HAVING crossing the predicate both ways
    "having_count": "SELECT owner, COUNT(*) AS n, SUM(balance) AS s FROM accounts"
    " GROUP BY owner HAVING COUNT(*) > 1",
    "having_sum": "SELECT region, SUM(balance) AS s FROM accounts GROUP BY region"
    " HAVING SUM(balance) > 0",
    # DISTINCT (an aggregate without functions)
    "distinct_owner": "SELECT DISTINCT owner, active FROM accounts",
    # an aggregate over an aggregate
    "histogram": "SELECT n, COUNT(*) AS groups FROM (SELECT owner, COUNT(*) AS n"
    " FROM accounts GROUP BY owner) GROUP BY n",
    # MIN/MAX: ties, the only extreme, all-NULL groups; several types
    "minmax": "SELECT owner, MIN(balance) AS mn, MAX(balance) AS mx FROM accounts GROUP BY owner",
    "minmax_types": "SELECT region, MIN(opened) AS o, MAX(seen) AS s, MIN(owner) AS w,"
    " MAX(credit) AS c, MAX(active) AS a, MIN(rate) AS r, COUNT(*) AS n FROM accounts"
    " GROUP BY region",
    "minmax_having": "SELECT owner, MAX(balance) AS mx FROM accounts GROUP BY owner"
    " HAVING MAX(balance) > 10",
    # MIN/MAX kept per group (no floating-point argument), beside exact sums; a FILTER;
    # the current extreme removed with and without a tie, and the group read again
    "minmax_kept": "SELECT region, MIN(opened) AS o, MAX(seen) AS s, MIN(owner) AS w,"
    " MAX(credit) AS c, MIN(active) AS a, SUM(balance) AS sb, AVG(credit) AS ac,"
    " COUNT(*) AS n FROM accounts GROUP BY region",
    "minmax_filter": "SELECT owner, MIN(balance) FILTER (WHERE active) AS mn,"
    " MAX(balance) FILTER (WHERE region > 1) AS mx, MAX(balance - 1) AS m1,"
    " COUNT(balance) AS nb FROM accounts GROUP BY owner",
    # floating-point MIN/MAX and COUNT(DISTINCT) kept: -0.0 counts as 0.0, and NaN ranks
    # above infinity, as Spark compares them; per group, global and by a computed key
    "minmax_double": "SELECT owner, MIN(rate) AS mn, MAX(rate) AS mx,"
    " COUNT(DISTINCT rate) AS d, COUNT(*) AS n FROM accounts GROUP BY owner",
    "extremes_double": "SELECT MIN(rate) AS mn, MAX(rate) AS mx, COUNT(rate) AS n FROM accounts",
    "extremes_double_computed": "SELECT region % 2 AS p, MIN(rate) AS mn, MAX(rate) AS mx"
    " FROM accounts GROUP BY region % 2",
    "distinct_beside_max_double": "SELECT owner, COUNT(DISTINCT region) AS dr,"
    " COUNT(DISTINCT balance) AS db, MAX(rate) AS mx FROM accounts GROUP BY owner",
    # a floating-point group key: -0.0 groups with 0.0, NaN with NaN (as Spark groups)
    "by_rate": "SELECT rate, COUNT(*) AS n, SUM(balance) AS s, MAX(owner) AS mx,"
    " COUNT(DISTINCT region) AS dr FROM accounts GROUP BY rate",
    # COUNT(DISTINCT): one, several, mixed with linear aggregates
    "count_distinct": "SELECT owner, COUNT(DISTINCT balance) AS d FROM accounts GROUP BY owner",
    "multi_distinct": "SELECT owner, COUNT(DISTINCT balance) AS db, COUNT(DISTINCT region)"
    " AS dr, COUNT(*) AS n, SUM(balance) AS s FROM accounts GROUP BY owner",
    # COUNT(DISTINCT) kept per group beside MIN and sums: a value's last row leaving, a
    # value coming back, NULLs not counted; strings, decimals, dates; global (one row
    # over empty input); over a join; a value held by rows of two groups
    "distinct_kept": "SELECT region, COUNT(DISTINCT owner) AS dw, MIN(credit) AS mc,"
    " SUM(balance) AS s, COUNT(*) AS n FROM accounts GROUP BY region",
    "distinct_global": "SELECT COUNT(DISTINCT credit) AS dc, COUNT(*) AS n,"
    " SUM(balance) AS s FROM accounts",
    "distinct_join": "SELECT a.owner, COUNT(DISTINCT t.day) AS days, COUNT(*) AS c"
    " FROM transfers t JOIN accounts a ON t.src = a.id GROUP BY a.owner",
    # several DISTINCT aggregates by a computed key (Spark's plan JSON leaves out the
    # Expand's projections there)
    "multi_distinct_computed": "SELECT id % 7 AS g, COUNT(DISTINCT owner) AS o,"
    " COUNT(DISTINCT balance) AS b, SUM(balance) AS s FROM accounts GROUP BY id % 7",
    # MIN/MAX whose groups cannot be read again (global, a computed key, over a join):
    # every value's count kept in order; decimals below zero, a FILTER, MIN and MAX of
    # one column sharing their counts, the extreme's last row leaving with and without
    # a tie, the input emptied
    "global_minmax": "SELECT MIN(credit) AS mc, MAX(credit) AS xc,"
    " MAX(opened) FILTER (WHERE active) AS mf, COUNT(*) AS n FROM accounts",
    "minmax_computed": "SELECT region % 2 AS r, MIN(balance) AS mn, MAX(credit) AS mx,"
    " COUNT(*) AS n FROM accounts GROUP BY region % 2",
    "global_max_join": "SELECT MAX(t.amount) AS mx, MIN(a.owner) AS mo, MIN(t.fee) AS mf"
    " FROM transfers t JOIN accounts a ON t.src = a.id",
    # Spark's rewrite of DISTINCT beside MAX, or with a FILTER: a MAX below the Expand,
    # whose groups cannot be looked up
    "distinct_beside_max": "SELECT owner, COUNT(DISTINCT region) AS dr,"
    " COUNT(DISTINCT balance) AS db, MAX(credit) AS mx, SUM(balance) AS s"
    " FROM accounts GROUP BY owner",
    "multi_distinct_global": "SELECT COUNT(DISTINCT owner) AS o, COUNT(DISTINCT balance) AS b"
    " FROM accounts",
    "distinct_filter": "SELECT owner, COUNT(DISTINCT region) FILTER (WHERE active) AS dr,"
    " COUNT(*) AS n FROM accounts GROUP BY owner",
    # a computed group key (no lookup by group needed: nothing is read again)
    "distinct_computed": "SELECT balance % 3 AS m, COUNT(DISTINCT owner) AS d,"
    " COUNT(*) AS n FROM accounts GROUP BY balance % 3",
    # projections and filters: CASE, COALESCE, arithmetic, bitwise operators, sqrt (of
    # negative numbers, NaN and -0.0 too), types
    "project": "SELECT id * 2 AS x, CASE WHEN balance > 50 THEN 'hi' ELSE owner END AS y,"
    " balance % 7 AS z, COALESCE(balance, -1) + region AS w, credit * 2 AS c2,"
    " NOT active AS inactive, region & 3 AS b_and, balance | 6 AS b_or, region ^ balance AS"
    " b_xor, ~region AS b_not, sqrt(balance) AS root, sqrt(rate) AS rate_root FROM accounts"
    " WHERE owner IS NOT NULL OR balance > 10",
    "project_types": "SELECT id, opened, seen, credit + 1.5 AS c, owner || '!' AS o,"
    " length(owner) AS l, COALESCE(active, FALSE) AS a FROM accounts"
    " WHERE opened >= DATE '2024-01-02' OR seen < TIMESTAMP '2024-01-01 12:00:00'",
    # groups by parts and truncations of dates and timestamps (tests/views/test_dates.py
    # holds the translations to Spark over many more values)
    "by_day": "SELECT date_trunc('DAY', seen) AS day, year(opened) AS y, COUNT(*) AS n,"
    " SUM(balance) AS s FROM accounts GROUP BY 1, 2",
    # inner joins: strict keys (NULL never matches), null-safe keys, several keys
    "join": "SELECT t.id, t.amount, a.owner FROM transfers t JOIN accounts a ON t.src = a.id",
    "join_nullsafe": "SELECT t.id AS tid, a.id AS aid FROM transfers t JOIN accounts a"
    " ON t.owner <=> a.owner",
    "join_mixed_keys": "SELECT t.id AS tid, a.id AS aid FROM transfers t JOIN accounts a"
    " ON t.src = a.id AND t.owner <=> a.owner",
    "self_join": "SELECT x.id, y.id AS yid FROM accounts x JOIN accounts y"
    " ON x.owner <=> y.owner AND x.id < y.id",
    # a floating-point key: -0.0 joins 0.0, NaN joins NaN (the mirror keeps the bits)
    "float_join": "SELECT x.id, y.id AS yid, x.rate FROM accounts x JOIN accounts y"
    " ON x.rate = y.rate AND x.id < y.id",
    # outer joins: NULL-padded rows appearing and disappearing
    "left_join": "SELECT a.id, a.owner, t.id AS tid, t.amount FROM accounts a"
    " LEFT JOIN transfers t ON t.dst = a.id",
    "left_join_residual": "SELECT a.id, t.id AS tid FROM accounts a LEFT JOIN transfers t"
    " ON t.dst = a.id AND t.amount > a.balance",
    "right_join": "SELECT a.id, a.balance, t.id AS tid FROM accounts a"
    " RIGHT JOIN transfers t ON a.id = t.src",
    "full_join": "SELECT a.id, t.id AS tid, a.owner AS ao, t.owner AS tow FROM accounts a"
    " FULL JOIN transfers t ON a.owner = t.owner",
    "full_join_nullsafe": "SELECT a.id, t.id AS tid FROM accounts a FULL JOIN transfers t"
    " ON a.owner <=> t.owner AND a.id = t.src",
    # outer joins chained: the lower one looked up by `=` on its padded side's columns
    # (its padded rows match no key) or on its preserved side's (rows and padding)
    "left_chain": "SELECT a.id, t.id AS tid, b.id AS bid, b.owner FROM accounts a LEFT JOIN"
    " transfers t ON t.src = a.id LEFT JOIN accounts b ON b.id = t.dst AND b.balance >"
    " t.amount",
    "full_then_left": "SELECT a.id, t.id AS tid, b.id AS bid FROM accounts a FULL JOIN"
    " transfers t ON t.src = a.id LEFT JOIN accounts b ON b.owner = a.owner AND b.id <> a.id",
    # semi and anti joins
    "semi_in": "SELECT a.id, a.owner FROM accounts a WHERE a.id IN (SELECT src FROM transfers)",
    "semi_exists": "SELECT a.id FROM accounts a WHERE EXISTS (SELECT 1 FROM transfers t"
    " WHERE t.dst = a.id AND t.amount > 10)",
    "anti_exists": "SELECT a.id, a.balance FROM accounts a WHERE NOT EXISTS"
    " (SELECT 1 FROM transfers t WHERE t.src = a.id)",
    # a floating-point key in outer, semi and anti joins: whether a key has partners is
    # counted from the index, where -0.0 and 0.0 (and NaNs) are stored apart
    "float_left_join": "SELECT a.id, t.id AS tid FROM accounts a LEFT JOIN transfers t"
    " ON t.rate = a.rate",
    "float_semi": "SELECT a.id, a.rate FROM accounts a WHERE a.rate IN (SELECT rate FROM transfers)",
    "float_anti": "SELECT a.id FROM accounts a WHERE NOT EXISTS"
    " (SELECT 1 FROM transfers t WHERE t.rate = a.rate)",
    # correlated scalar subqueries (a left join with an aggregate)
    "scalar_count": "SELECT id, owner, (SELECT COUNT(*) FROM transfers t WHERE t.src = a.id)"
    " AS n FROM accounts a",
    "scalar_sum": "SELECT id, (SELECT SUM(amount) FROM transfers t WHERE t.dst = a.id)"
    " AS s FROM accounts a",
    "scalar_max": "SELECT id, (SELECT MAX(amount) FROM transfers t WHERE t.src = a.id)"
    " AS m FROM accounts a",
    # cross join of global aggregates
    "cross_totals": "SELECT p.n, q.s, q.c FROM (SELECT COUNT(*) AS n FROM accounts) p"
    " CROSS JOIN (SELECT SUM(amount) AS s, COUNT(*) AS c FROM transfers) q",
    # joins feeding aggregates
    "join_agg": "SELECT a.owner, SUM(t.amount) AS s, COUNT(*) AS c, SUM(t.fee) AS f"
    " FROM transfers t JOIN accounts a ON t.src = a.id GROUP BY a.owner",
    "left_join_agg": "SELECT a.owner, COUNT(*) AS c, COUNT(t.id) AS matched,"
    " SUM(t.amount) AS s FROM accounts a LEFT JOIN transfers t ON t.dst = a.id"
    " GROUP BY a.owner",
    "join_max": "SELECT a.owner, MAX(t.amount) AS mx, MIN(t.day) AS first_day"
    " FROM transfers t JOIN accounts a ON t.src = a.id GROUP BY a.owner",
    "global_join_agg": "SELECT COUNT(*) AS c, COUNT(a.id) AS matched FROM transfers t"
    " LEFT JOIN accounts a ON t.dst = a.id",
    # existence joins (an EXISTS beside another condition, or as a value): every left
    # row, flagged; a condition beyond the keys, a null-safe key
    "exists_beside": "SELECT a.id, a.owner, EXISTS (SELECT 1 FROM transfers t WHERE t.dst ="
    " a.id AND t.amount > a.balance) AS outbid FROM accounts a WHERE a.active OR NOT EXISTS"
    " (SELECT 1 FROM transfers t WHERE t.owner <=> a.owner)",
    # window functions over the partitions a batch touched: the latest row per key
    # (row_number over an order holding the primary key; a NULL owner is one partition;
    # Spark puts a WindowGroupLimit under it), ties ranked alike, whole-partition and
    # running aggregates (a RANGE frame counts tied dates together)
    "latest_per_owner": "SELECT * FROM (SELECT id, owner, balance, row_number() OVER"
    " (PARTITION BY owner ORDER BY balance DESC NULLS LAST, id) AS rn FROM accounts)"
    " WHERE rn = 1",
    "rank_top2": "SELECT * FROM (SELECT owner, id, balance, rank() OVER (PARTITION BY owner"
    " ORDER BY balance DESC) AS r, dense_rank() OVER (PARTITION BY owner ORDER BY balance"
    " DESC) AS dr FROM accounts) WHERE r <= 2",
    # (AVG of a DECIMAL(10,2): Spark's average in DOUBLE, rounded half up at scale 6;
    # a RANGE frame of values around the current one's)
    "window_sums": "SELECT id, owner, SUM(balance) OVER (PARTITION BY owner) AS s,"
    " AVG(credit) OVER (PARTITION BY owner) AS avg_credit,"
    " COUNT(balance) OVER (PARTITION BY owner ORDER BY opened, region) AS running_n,"
    " MAX(credit) OVER (PARTITION BY owner, region) AS top,"
    " SUM(credit) OVER (PARTITION BY owner ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING"
    " AND CURRENT ROW) AS running_credit, SUM(balance) OVER (PARTITION BY owner ORDER BY"
    " region DESC RANGE BETWEEN 1 PRECEDING AND 2 FOLLOWING) AS near_regions, COUNT(*) OVER"
    " (PARTITION BY owner ORDER BY region DESC RANGE BETWEEN 0 PRECEDING AND CURRENT ROW) AS"
    " peers FROM accounts",
    # the first ranks read from the mirror's index, by a date and a string (NULLs placed
    # as asked, ties across the limit); behind a filter, whole partitions are read
    "first_opened": "SELECT * FROM (SELECT region, id, owner, opened, rank() OVER"
    " (PARTITION BY region ORDER BY opened ASC NULLS LAST, owner DESC NULLS FIRST) AS r"
    " FROM accounts) WHERE r <= 2",
    "ties_at_the_limit": "SELECT * FROM (SELECT active, id, region, rank() OVER (PARTITION"
    " BY active ORDER BY region DESC) AS r FROM accounts) WHERE r <= 1",
    # a window over an aggregate's groups (looked up in its kept state)
    "rank_of_sums": "SELECT * FROM (SELECT region, owner, s, rank() OVER (PARTITION BY region"
    " ORDER BY s DESC) AS r FROM (SELECT region, owner, SUM(balance) AS s FROM accounts"
    " GROUP BY region, owner)) WHERE r <= 2",
    "top_active": "SELECT * FROM (SELECT owner, id, balance, row_number() OVER (PARTITION"
    " BY owner ORDER BY balance, id DESC) AS rn FROM accounts WHERE active) WHERE rn <= 2",
    # a window over a join, partitioned by a join key; an aggregate over a window
    "join_rank": "SELECT t.id, t.src, a.owner, rank() OVER (PARTITION BY t.src ORDER BY"
    " t.amount DESC) AS r FROM transfers t JOIN accounts a ON t.src = a.id",
    "agg_over_window": "SELECT owner, COUNT(*) AS n, SUM(balance) AS s FROM (SELECT owner,"
    " balance, dense_rank() OVER (PARTITION BY owner ORDER BY region) AS dr FROM accounts)"
    " WHERE dr = 1 GROUP BY owner",
    # an order holding a unique key through an aggregate (its groups), a join to a
    # primary key (each transfer meets one account) and an existence join
    "keys_through_groups": "SELECT owner, region, n, first_value(n) OVER (PARTITION BY owner"
    " ORDER BY region NULLS LAST) AS f, lag(n) OVER (PARTITION BY owner ORDER BY region) AS"
    " prev FROM (SELECT owner, region, COUNT(*) AS n FROM accounts GROUP BY owner, region)",
    "keys_through_joins": "SELECT t.id, a.owner, lag(a.balance) IGNORE NULLS OVER (PARTITION"
    " BY t.src ORDER BY t.id) AS lb, row_number() OVER (PARTITION BY t.src ORDER BY t.id) AS"
    " rn FROM transfers t JOIN accounts a ON t.dst = a.id WHERE t.amount > 0 OR EXISTS"
    " (SELECT 1 FROM accounts b WHERE b.id = t.src)",
    # rows a fixed number away in an order holding the key: lag and lead (a constant
    # default; NULLs ignored or not), ntile, frames of rows before and after the current one (empty near the
    # end), a frame's first and last values (of doubles too; NULLs ignored or not)
    "window_offsets": "SELECT id, owner, lag(balance) OVER (PARTITION BY owner ORDER BY id)"
    " AS prev, lead(credit, 2, 0) OVER (PARTITION BY owner ORDER BY id) AS next2, lag(balance)"
    " IGNORE NULLS OVER (PARTITION BY owner ORDER BY id) AS prev_known, ntile(2)"
    " OVER (PARTITION BY owner ORDER BY opened NULLS LAST, id DESC) AS half, SUM(balance)"
    " OVER (PARTITION BY owner ORDER BY id ROWS BETWEEN 2 PRECEDING AND 1 FOLLOWING) AS"
    " moving, MIN(opened) OVER (PARTITION BY owner, region ORDER BY id ROWS BETWEEN 1"
    " FOLLOWING AND 3 FOLLOWING) AS ahead, last(seen) OVER (PARTITION BY owner, region ORDER"
    " BY id ROWS BETWEEN 1 FOLLOWING AND 3 FOLLOWING) AS ahead_seen, first_value(rate) OVER"
    " (PARTITION BY owner ORDER BY id) AS first_rate, last_value(balance, true) OVER"
    " (PARTITION BY owner ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED"
    " FOLLOWING) AS last_balance, first(credit) IGNORE NULLS OVER (PARTITION BY owner ORDER"
    " BY id ROWS BETWEEN 1 PRECEDING AND 2 FOLLOWING) AS near_credit FROM accounts",
    # windows of different partitions, each over the one below (looked up there by
    # columns that do not partition it: the partitions holding the values, read whole)
    "two_rankings": "SELECT id, owner, region, rank() OVER (PARTITION BY owner ORDER BY"
    " balance DESC) AS in_owner, row_number() OVER (PARTITION BY region ORDER BY balance,"
    " id) AS in_region, SUM(balance) OVER (PARTITION BY active) AS by_active FROM accounts",
    # a row's place among its partition's (ties alike: no key needed), over a join; AVG
    # of a DECIMAL(12,3), exact (a sum and a count, rounded half up at scale 7); a RANGE
    # frame of an interval of time
    "window_distribution": "SELECT t.id, a.region, percent_rank() OVER (PARTITION BY"
    " a.region ORDER BY t.amount) AS pr, cume_dist() OVER (PARTITION BY a.region ORDER BY"
    " t.amount DESC NULLS LAST) AS cd, AVG(t.amount) OVER (PARTITION BY a.region ORDER BY"
    " t.amount) AS running_mean, AVG(t.fee) OVER (PARTITION BY a.region ORDER BY t.amount)"
    " AS running_fee, COUNT(*) OVER (PARTITION BY a.region ORDER BY a.seen RANGE BETWEEN"
    " INTERVAL '0 00:00:00.000001' DAY TO SECOND PRECEDING AND CURRENT ROW) AS"
    " within_a_microsecond FROM transfers t JOIN accounts a ON t.src = a.id",
}

# name -> (SQL, the reason the classifier must give): shapes outside the rules, recomputed.
RECOMPUTE: dict[str, tuple[str, str]] = {
    "left_chain_nullsafe": (  # (the padded rows would all match a NULL)
        "SELECT a.id, t.id AS tid, b.id AS bid FROM accounts a LEFT JOIN transfers t ON"
        " t.src = a.id LEFT JOIN accounts b ON b.owner <=> t.owner",
        "a join whose inputs cannot be looked up by the join key",
    ),
    "window": (
        "SELECT id, row_number() OVER (ORDER BY balance, id) AS rn FROM accounts",
        "a window function without PARTITION BY",
    ),
    "window_lag": (  # the row before a tied one is Spark's row order
        "SELECT id, lag(balance) OVER (PARTITION BY owner ORDER BY region) AS l FROM accounts",
        "a window function that tells tied rows apart",
    ),
    "row_number_over_join": (  # (a transfer meets every account of its owner)
        "SELECT t.id, a.id AS aid, row_number() OVER (PARTITION BY t.src ORDER BY t.id) AS rn"
        " FROM transfers t JOIN accounts a ON a.owner = t.owner",
        "a window function that tells tied rows apart",
    ),
    "row_number_tied": (  # which of two tied rows comes first is Spark's row order
        "SELECT id, row_number() OVER (PARTITION BY owner ORDER BY balance) AS rn FROM accounts",
        "a window function that tells tied rows apart",
    ),
    "first_value_tied": (  # the first of tied rows is Spark's row order
        "SELECT id, first_value(balance) OVER (PARTITION BY owner ORDER BY region) AS f"
        " FROM accounts",
        "a window function that tells tied rows apart",
    ),
    "window_frame_inverted": (  # (an empty frame in Spark; DuckDB refuses to read it)
        "SELECT id, COUNT(*) OVER (PARTITION BY owner ORDER BY seen RANGE BETWEEN CURRENT ROW"
        " AND INTERVAL '1' HOUR PRECEDING) AS c FROM accounts",
        "a window frame that starts after the current row and ends at it or before it, or"
        " starts at it and ends before it",
    ),
    "window_offset": (
        "SELECT id, COUNT(*) OVER (PARTITION BY owner ORDER BY credit RANGE BETWEEN 1.5"
        " PRECEDING AND CURRENT ROW) AS s FROM accounts",
        "a RANGE window frame with an offset of type decimal(10,2)",
    ),
    "lag_backwards": (  # (Spark's lag by -1 is a lead)
        "SELECT id, lag(balance, -1) OVER (PARTITION BY owner ORDER BY id) AS l FROM accounts",
        "the window function Lag with an offset that is not a constant of at least 0",
    ),
    "window_double": (
        "SELECT id, rank() OVER (PARTITION BY owner ORDER BY rate) AS r FROM accounts",
        "a window ordered by values of type double",
    ),
    "top3": (
        "SELECT id, balance FROM accounts ORDER BY balance DESC NULLS LAST, id LIMIT 3",
        "LIMIT",
    ),
    "sorted": ("SELECT id, balance FROM accounts ORDER BY balance", "ORDER BY"),
    "locate_from": (
        "SELECT id, locate('a', owner, 2) AS l FROM accounts",
        "locate() from a position other than a literal 1",
    ),
    "pmod_by_column": (  # (by 0 it fails, by a negative divisor it may be negative)
        "SELECT id, pmod(balance, region) AS p FROM accounts",
        "pmod by a divisor other than a constant above 0",
    ),
    "sha512": (
        "SELECT id, sha2(owner, 512) AS h FROM accounts",
        "sha2 to a bit length other than 256",
    ),
    # Spark's rewrite of EXCEPT ALL replicates rows (a Generate)
    "except_all": (
        "SELECT owner FROM accounts EXCEPT ALL SELECT owner FROM transfers",
        "a generator",
    ),
    "theta_join": (
        "SELECT a.id, t.id AS tid FROM accounts a JOIN transfers t ON t.amount > a.balance",
        "inner join without an equality between the two sides",
    ),
    "not_in": (  # an outside check read "anti join without an equality" as wrong
        "SELECT id FROM accounts WHERE id NOT IN (SELECT src FROM transfers)",
        "NOT IN over values that may be NULL",
    ),
    "sum_double": ("SELECT SUM(rate) AS s FROM accounts", "SUM of floating-point values"),
    "global_distinct_beside_max": (  # an outside check expected it incremental
        "SELECT COUNT(DISTINCT region) AS dr, COUNT(DISTINCT balance) AS db,"
        " MAX(credit) AS mx FROM accounts",
        "a global aggregate of several DISTINCT aggregates beside other functions",
    ),
    "avg_double": ("SELECT owner, AVG(rate) AS r FROM accounts GROUP BY owner", "AVG of double"),
    "random": ("SELECT id, rand() AS r FROM accounts", "Rand"),
    # Java's regular expressions, not DuckDB's (tests/views/test_strings.py has the
    # functions of strings that are translated)
    "regexp": ("SELECT id, regexp_replace(owner, 'a+', 'b') AS r FROM accounts", "RegExpReplace"),
    # Spark's optimizer puts the time it planned in their place: kept, the views froze at
    # the job's start (an outside check)
    "clock": ("SELECT id, current_timestamp() AS at FROM accounts", "current_timestamp()"),
    "today": (
        "SELECT COUNT(*) AS n, MAX(current_date()) AS d, MIN(now()) AS t FROM accounts",
        "current_date(), now()",
    ),
    "local_clock": (
        "SELECT id FROM accounts WHERE localtimestamp() > TIMESTAMP '2020-01-01'",
        "localtimestamp()",
    ),
    # Spark rounds the product to DECIMAL(38,6); the exact one outgrows DECIMAL(38)
    "wide_product": (
        "SELECT id, CAST(credit AS DECIMAL(38,18)) * CAST(credit AS DECIMAL(38,18)) AS sq"
        " FROM accounts",
        "Spark rounds the product to decimal(38,6)",
    ),
    # found by an outside check of expression semantics: each gave another value than
    # Spark, or failed where Spark does not (or the other way round)
    "like_underscore": (
        "SELECT id FROM accounts WHERE owner LIKE 'a_'",
        "LIKE with a pattern Spark does not simplify",
    ),
    "wide_negation": (  # Spark rounds a negated decimal to 34 digits
        "SELECT id, -CAST(credit AS DECIMAL(38,10)) AS n FROM accounts",
        "- of decimal(38,10)",
    ),
    "wide_sum_scale": (  # Spark adds exactly, then rounds to DECIMAL(38,9)
        "SELECT id, CAST(credit AS DECIMAL(38,10)) + CAST(credit AS DECIMAL(38,10)) AS s"
        " FROM accounts",
        "Spark rounds the result to decimal(38,9)",
    ),
    "double_to_float": (  # Spark makes 1e300 infinite
        "SELECT id, CAST(rate AS FLOAT) AS f FROM accounts",
        "cast of double to float",
    ),
    "wide_decimal_to_int": (  # Spark checks the range in double
        "SELECT id, CAST(CAST(credit AS DECIMAL(38,10)) AS INT) AS i FROM accounts",
        "cast of decimal(38,10) to integer",
    ),
    # Spark's optimized plan shows try_divide as a division, try_cast as a cast, try_sum
    # as a SUM: maintained as those, they failed where Spark gives NULL (an outside check)
    "try_divide": (
        "SELECT id, try_divide(balance, region) AS q FROM accounts",
        "try_divide() (Spark's plan does not tell",
    ),
    "try_in_a_wide_view": (  # Spark's rendering cut the 26th expression on
        "SELECT "
        + ", ".join(f"id + {i} AS c{i}" for i in range(30))
        + ", try_divide(balance, region) AS q FROM accounts",
        "try_divide() (",
    ),
    "try_functions": (
        "SELECT owner, try_sum(balance) AS s, MAX(TRY_CAST(owner AS INT)) AS n FROM accounts"
        " GROUP BY owner",
        "try_cast(), try_sum() (",
    ),
}
