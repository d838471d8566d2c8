"""Units of durations in broker and NameServer configuration: one unit per key, whatever its spelling."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from rocket.broker.config import LEGACY_SECONDS_KEYS, STORE_MILLISECOND_KEYS, BrokerConfig, ConfigError
from rocket.nameserver import config as ns_config
from rocket.store.api import MessageStoreConfig


def store_of(tmp_path: Path, **overrides: str) -> MessageStoreConfig:
    cfg = BrokerConfig(store_path_root_dir=str(tmp_path))
    cfg.update(overrides)
    return cfg.store_config()


@pytest.mark.parametrize("key", ["flushIntervalCommitLog", "FlushIntervalCommitLog", "flush-interval-commit-log",
                                 "FLUSHINTERVALCOMMITLOG"])
def test_a_store_interval_is_milliseconds_in_every_spelling_but_the_legacy_one(tmp_path: Path, key: str) -> None:
    assert store_of(tmp_path, **{key: "250"}).flush_interval_commit_log == pytest.approx(0.25)


def test_every_store_millisecond_key_converts_to_the_store_seconds(tmp_path: Path) -> None:
    store = store_of(tmp_path, **{name: "1500" for name in STORE_MILLISECOND_KEYS.values()})
    assert store.flush_interval_commit_log == pytest.approx(1.5)
    assert store.flush_commit_log_thorough_interval == pytest.approx(1.5)
    assert store.sync_flush_timeout == pytest.approx(1.5)
    assert store.flush_interval_consume_queue == pytest.approx(1.5)
    assert store.flush_consumer_offset_interval == pytest.approx(1.5)
    assert store.clean_resource_interval == pytest.approx(1.5)


def test_legacy_snake_case_spellings_keep_their_seconds_and_warn(tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="rocket.broker"):
        store = store_of(tmp_path, flush_interval_commit_log="0.5", clean_resource_interval="3600")
    assert store.flush_interval_commit_log == pytest.approx(0.5)
    assert store.clean_resource_interval == pytest.approx(3600.0)
    assert "flushIntervalCommitLog=500" in caplog.text and "cleanResourceInterval=3600000" in caplog.text
    assert {k.replace("_", "") for k in LEGACY_SECONDS_KEYS} == set(STORE_MILLISECOND_KEYS)


def test_a_fractional_millisecond_value_is_refused_naming_the_unit(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"flushIntervalCommitLog is in milliseconds and takes an integer"):
        store_of(tmp_path, flushIntervalCommitLog="0.5")


def test_file_reserved_time_is_hours_in_both_names(tmp_path: Path) -> None:
    assert store_of(tmp_path, fileReservedTime="48").file_reserved_time_hours == 48
    assert store_of(tmp_path, file_reserved_time_hours="12").file_reserved_time_hours == 12


def test_broker_own_durations_are_milliseconds_in_every_spelling() -> None:
    cfg = BrokerConfig()
    cfg.update({"haSendHeartbeatInterval": "700", "ha_housekeeping_interval": "9000", "slave-timeout": "1200"})
    assert (cfg.ha_send_heartbeat_interval, cfg.ha_housekeeping_interval, cfg.slave_timeout) == (700, 9000, 1200)


def test_nameserver_scan_interval_in_seconds_or_under_rocketmq_name_in_ms(tmp_path: Path) -> None:
    seconds = tmp_path / "s.toml"
    seconds.write_text("scan-interval = 2.5\nbroker_timeout = 30\n")
    millis = tmp_path / "ms.json"
    millis.write_text('{"scanNotActiveBrokerInterval": 2500}')
    assert ns_config.load_config_file(seconds).scan_interval == pytest.approx(2.5)
    assert ns_config.load_config_file(seconds).broker_timeout == pytest.approx(30.0)
    assert ns_config.load_config_file(millis).scan_interval == pytest.approx(2.5)


def test_nameserver_refuses_a_fractional_millisecond_value(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"scanNotActiveBrokerInterval": 2.5}')
    with pytest.raises(ns_config.ConfigError, match="scanNotActiveBrokerInterval is in milliseconds"):
        ns_config.load_config_file(bad)
