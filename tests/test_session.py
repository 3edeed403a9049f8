from __future__ import annotations

from typing import Any

from deltamv.session import _driver_java_options


def test_user_java_options_keep_deltamvs_logging_config() -> None:
    options = _driver_java_options("-XX:NativeMemoryTracking=summary")
    assert options.startswith("-Dlog4j2.configurationFile=file:")
    assert options.endswith(" -XX:NativeMemoryTracking=summary")
    assert _driver_java_options("").startswith("-Dlog4j2.configurationFile=file:")


def test_a_users_own_logging_config_wins() -> None:
    mine = "-Dlog4j2.configurationFile=file:/etc/mine.properties -Xss4m"
    assert _driver_java_options(mine) == mine


def test_the_session_factory_passes_the_logging_config_to_the_driver(spark: Any) -> None:
    options = spark.sparkContext.getConf().get("spark.driver.extraJavaOptions")
    assert "log4j2.configurationFile=file:" in options
    assert options.split("=file:")[1].split()[0].endswith("deltamv/log4j2.properties")
