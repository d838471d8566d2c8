"""The pure parts behind mqadmin's commands: fastjson's object-keyed maps (quirk Q4) and the
NameServer settings of GET/UPDATE_NAMESRV_CONFIG. The commands themselves run against real
servers in ``tests/compat/test_mqadmin.py``."""

from __future__ import annotations

import pytest

from rocket.broker.processor.tools import dumps_java
from rocket.client.admin import loads_object_keys, parse_consume_stats
from rocket.nameserver.config import (
    ConfigError,
    NameServerConfig,
    parse_java_properties,
    runtime_update,
    to_java_properties,
)
from rocket.protocol import MessageQueue


def test_dumps_java_writes_message_queue_keys_as_objects() -> None:
    mq = MessageQueue("T", "broker-a", 3)
    body = dumps_java({"offsetTable": {mq: {"brokerOffset": 5, "consumerOffset": 2}}, "consumeTps": 1.5,
                       "names": ["a", "b"]})
    assert body == (b'{"offsetTable":{{"brokerName":"broker-a","queueId":3,"topic":"T"}:'
                    b'{"brokerOffset":5,"consumerOffset":2}},"consumeTps":1.5,"names":["a","b"]}')
    # Our own admin client reads it back.
    queues, tps = parse_consume_stats(body)
    assert [(q.queue.topic, q.queue.broker_name, q.queue.queue_id, q.broker_offset, q.consumer_offset)
            for q in queues] == [("T", "broker-a", 3, 5, 2)] and tps == 1.5
    assert loads_object_keys(body)["names"] == ["a", "b"]


def test_dumps_java_nested_lists_of_maps() -> None:
    mq = MessageQueue("T", "b", 0)
    body = dumps_java({"consumeStatsList": [{"G": [{"offsetTable": {mq: 1}}]}], "totalDiff": 0})
    assert body == b'{"consumeStatsList":[{"G":[{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:1}}]}],' \
                   b'"totalDiff":0}'


def test_namesrv_properties_use_java_names_and_units() -> None:
    cfg = NameServerConfig(port=9876, scan_interval=10.0, broker_timeout=120.0)
    props = to_java_properties(cfg)
    assert props["listenPort"] == "9876"
    assert props["scanNotActiveBrokerInterval"] == "10000"
    assert props["brokerChannelExpiredTime"] == "120000"
    assert props["orderMessageEnable"] == "false"


def test_namesrv_runtime_update_checks_everything_first() -> None:
    cfg = NameServerConfig()
    assert runtime_update(cfg, {"orderMessageEnable": "TRUE", "scanNotActiveBrokerInterval": "5000"}) == {
        "order_message_enable": True, "scan_interval": 5.0}
    for bad, words in (({"listenPort": "1"}, "read at start only"),
                       ({"noSuchKey": "1"}, "unknown NameServer setting 'noSuchKey'"),
                       ({"enableTopicList": "yes"}, "enableTopicList"),
                       ({"scanNotActiveBrokerInterval": "0"}, "must be positive")):
        with pytest.raises(ConfigError, match=words):
            runtime_update(cfg, bad)
    assert cfg.order_message_enable is False  # nothing applied by a check


def test_parse_java_properties() -> None:
    text = "# comment\n! also\nkey1=value1\nkey2 : value 2\n\nbare\n"
    assert parse_java_properties(text) == {"key1": "value1", "key2": "value 2", "bare": ""}


def test_minute_counter_sums_minute_hour_day() -> None:
    from rocket.broker.stats import BrokerStats, MinuteCounter

    t0 = 1_000_000.0
    counter = MinuteCounter(now=t0)
    counter.add(5, now=t0)                 # a day minus a bit ago, seen from the end
    counter.add(3, now=t0 + 23 * 3600)     # within the last hour
    counter.add(2, now=t0 + 86_000)        # within the last minute
    end = t0 + 86_010
    assert counter.sum(1, end) == 2 and counter.sum(60, end) == 5 and counter.sum(1440, end) == 10
    day = counter.snapshot(1440, end)
    assert day["sum"] == 10 and day["tps"] == round(10 / 86_010, 2)
    counter.add(1, now=t0 + 2 * 86_400)    # a day later the first buckets are gone
    assert counter.sum(1440, t0 + 2 * 86_400) == 1

    stats = BrokerStats()
    stats.on_put(4, 400, "T")
    stats.on_get("G", "T", 3, 300)
    assert stats.stats_data("TOPIC_PUT_NUMS", "T")["statsMinute"]["sum"] == 4  # type: ignore[index]
    assert stats.stats_data("GROUP_GET_NUMS", "T@G")["statsDay"]["sum"] == 3  # type: ignore[index]
    assert stats.stats_data("GROUP_GET_NUMS", "T@other") is None
