from __future__ import annotations

from pathlib import Path

import pytest

from deltamv.config import load_config, parse_interval
from deltamv.errors import ConfigError

GOOD = """
[job]
name = "bank"
changelog = "data/changelog"
checkpoint = "out/_checkpoint"
trigger_interval = "500 ms"

[tables.accounts]
schema = "id BIGINT, owner STRING, balance DECIMAL(18,2)"
primary_key = ["id"]

[views.total_balance]
sql = "SELECT SUM(balance) AS total FROM accounts"
path = "out/views/total_balance"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_good_config_resolves_paths_against_its_folder(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, GOOD))
    assert config.name == "bank"
    assert config.changelog == str(tmp_path / "data" / "changelog")
    assert config.views["total_balance"].path == str(tmp_path / "out" / "views" / "total_balance")
    assert config.trigger_interval == 0.5
    assert config.tables["accounts"].schema.column("balance").ddl_type == "DECIMAL(18,2)"


@pytest.mark.parametrize(
    ("change", "key"),
    [
        (("[job]\n", "[job]\nspeed = 3\n"), "job.speed"),
        (('name = "bank"\n', ""), "job.name"),
        (('primary_key = ["id"]', 'primary_key = ["nope"]'), "tables.accounts.primary_key"),
        (('primary_key = ["id"]', 'primary_key = ["id", "id"]'), "tables.accounts.primary_key"),
        (("id BIGINT, owner STRING", "id BIGNUM, owner STRING"), "tables.accounts.schema"),
        (('trigger_interval = "500 ms"', 'trigger_interval = "soon"'), "job.trigger_interval"),
        (('sql = "SELECT', 'sqll = "SELECT'), "views.total_balance.sqll"),
        (
            ("[views.total_balance]", "[views.total_balance]\npath2 = 'x'"),
            "views.total_balance.path2",
        ),
    ],
)
def test_errors_name_the_key(tmp_path: Path, change: tuple[str, str], key: str) -> None:
    text = GOOD.replace(*change)
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text))
    assert info.value.key == key
    assert key in str(info.value)
    assert "\n" not in str(info.value)


def test_an_interval_without_its_unit_says_how_to_write_it(tmp_path: Path) -> None:
    text = GOOD.replace('trigger_interval = "500 ms"', "trigger_interval = 5")
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text))
    assert str(info.value).endswith(
        "job.trigger_interval: 5 has no unit: write it as a string, like '5 seconds'"
    )


def test_a_comment_with_a_comma_is_one_column(tmp_path: Path) -> None:
    # (a TOML "\\" is one backslash: the comment is 'name, then \'initials\'')
    text = GOOD.replace("owner STRING", "owner STRING COMMENT 'name, then \\\\'initials\\\\''")
    assert "COMMENT" in text
    config = load_config(write(tmp_path, text))
    assert config.tables["accounts"].schema.names == ["id", "owner", "balance"]


def test_two_views_on_one_path(tmp_path: Path) -> None:
    text = GOOD + '\n[views.again]\nsql = "SELECT 1 AS one"\npath = "out/views/total_balance"\n'
    with pytest.raises(ConfigError, match=r"also used by views\.total_balance\.path"):
        load_config(write(tmp_path, text))


def test_invariant_must_name_a_view_and_one_kind(tmp_path: Path) -> None:
    bad_view = GOOD + '\n[invariants.x]\nview = "nope"\nconstant = "SELECT 1"\n'
    with pytest.raises(ConfigError, match=r"invariants\.x\.view"):
        load_config(write(tmp_path, bad_view))
    two_kinds = (
        GOOD
        + '\n[invariants.x]\nview = "total_balance"\nconstant = "SELECT 1"\nalways = "SELECT true"\n'
    )
    with pytest.raises(ConfigError, match="exactly one"):
        load_config(write(tmp_path, two_kinds))


def test_not_toml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(write(tmp_path, "[job\n"))


def test_a_config_file_that_cannot_be_read_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "bin.toml").write_bytes(b'[job]\nname = "\xff"\n')
    with pytest.raises(ConfigError, match=r"bin.toml: not UTF-8 text \(invalid start byte at"):
        load_config(tmp_path / "bin.toml")
    with pytest.raises(ConfigError, match=r"cannot read config file .*: Is a directory"):
        load_config(tmp_path)


def test_intervals() -> None:
    assert parse_interval("2 seconds") == 2
    assert parse_interval("1 minute") == 60
    assert parse_interval("250ms") == 0.25


def test_a_session_time_zone_other_than_utc_is_refused(tmp_path: Path) -> None:
    """Views are evaluated in UTC (docs/config.md): Spark's recompute and the incremental
    maintenance would otherwise disagree on a timestamp's date or hour."""
    zone = '\n[spark]\nconf = { "spark.sql.session.timeZone" = "%s" }\n'
    for utc in ("UTC", "Etc/UTC", "gmt", "+00:00", "Zulu", "Etc/UCT"):
        config = load_config(write(tmp_path, GOOD + zone % utc))
        assert config.spark.conf["spark.sql.session.timeZone"] == utc
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, GOOD + zone % "America/New_York"))
    assert info.value.key == "spark.conf.spark.sql.session.timeZone"
    assert "'America/New_York'" in str(info.value) and "\n" not in str(info.value)


def test_spark_without_ansi_mode_is_refused(tmp_path: Path) -> None:
    """Views are evaluated in ANSI mode: the incremental engine fails where Spark's ANSI
    mode fails (a division by zero), so a recompute without it would disagree."""
    ansi = '\n[spark]\nconf = { "spark.sql.ansi.enabled" = %s }\n'
    for on in ("true", '"true"', '"TRUE"'):
        config = load_config(write(tmp_path, GOOD + ansi % on))
        assert config.spark.conf["spark.sql.ansi.enabled"].lower() == "true"
    for off in ("false", '"false"', '"no"'):
        with pytest.raises(ConfigError) as info:
            load_config(write(tmp_path, GOOD + ansi % off))
        assert info.value.key == "spark.conf.spark.sql.ansi.enabled"
        assert "try_divide" in str(info.value) and "\n" not in str(info.value)


def test_a_session_built_with_another_time_zone_is_refused() -> None:
    """The same rule for a library caller's settings (build_spark's ``conf``)."""
    from deltamv.errors import DeltaMVError
    from deltamv.session import build_spark

    with pytest.raises(DeltaMVError, match="evaluates every view in UTC"):
        build_spark(conf={"spark.sql.session.timeZone": "Asia/Tokyo"})
    with pytest.raises(DeltaMVError, match="ANSI mode"):
        build_spark(conf={"spark.sql.ansi.enabled": "false"})


@pytest.mark.parametrize(
    ("changes", "refused"),
    [
        # accepted: folders the upstream's readers never read, outputs apart
        ({'checkpoint = "out/_checkpoint"': 'checkpoint = "data/changelog/_checkpoint"'}, None),
        ({'path = "out/views/total_balance"': 'path = "data/changelog/.views/total"'}, None),
        ({'changelog = "data/changelog"': 'changelog = "out/_checkpoint/feed"'}, None),
        (
            {
                'changelog = "data/changelog"': 'changelog = "data/changelog"\nsnapshot = "data"',
                'path = "out/views/total_balance"': 'path = "data/views/total"',
            },
            None,
        ),
        # refused: an output a vacuum or a reader would reach
        (
            {'path = "out/views/total_balance"': 'path = "data/changelog/views/total"'},
            "views.total_balance.path: path '.*' lies inside job.changelog",
        ),
        (
            {'path = "out/views/total_balance"': 'path = "data"'},
            "views.total_balance.path: path '.*' holds job.changelog",
        ),
        (
            {
                'changelog = "data/changelog"': 'changelog = "data/changelog"\nsnapshot = "data"',
                'path = "out/views/total_balance"': 'path = "data/accounts/total"',
            },
            "views.total_balance.path: path '.*' lies inside job.snapshot",
        ),
        (
            {'path = "out/views/total_balance"': 'path = "out"'},
            "views.total_balance.path: path '.*' holds job.checkpoint",
        ),
        (
            {'checkpoint = "out/_checkpoint"': 'checkpoint = "out/ck{1}"'},
            r"job.checkpoint: path '.*' has \{ \}, which delta-rs cannot open a table under",
        ),
    ],
)
def test_where_outputs_and_the_checkpoint_may_lie(
    tmp_path: Path, changes: dict[str, str], refused: str | None
) -> None:
    text = GOOD
    for old, new in changes.items():
        assert old in text
        text = text.replace(old, new)
    if refused is None:
        load_config(write(tmp_path, text))
    else:
        with pytest.raises(ConfigError, match=refused):
            load_config(write(tmp_path, text))
