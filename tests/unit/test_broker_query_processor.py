"""QueryMessageProcessor on its own: a small fake broker (the QueryBroker protocol) around a real store."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rocket.broker.config import BrokerConfig
from rocket.broker.interfaces import MessageQueryStore, QueryBroker
from rocket.broker.processor.query import QueryMessageProcessor
from rocket.message import decode_record, decode_records
from rocket.protocol import RequestCode, ResponseCode
from rocket.remoting import RemotingCommand
from tests.store_helpers import make_request, opened, small_config


@dataclass
class FakeQueryBroker:
    """Implements :class:`QueryBroker`: just settings and a store, no controller."""

    store: MessageQueryStore
    config: BrokerConfig = field(default_factory=BrokerConfig)


def _query(topic: str, key: str, max_num: int, *, unique: bool = False) -> RemotingCommand:
    # as read from a frame: every ext field a string (the compiled RemotingCommand checks the type)
    ext = {"topic": topic, "key": key, "maxNum": str(max_num), "beginTimestamp": "0", "endTimestamp": str(2**62)}
    if unique:
        ext["_UNIQUE_KEY_QUERY"] = "true"
    return RemotingCommand(code=RequestCode.QUERY_MESSAGE, ext_fields=ext)


async def test_query_message_by_key_and_view_by_offset(tmp_path: Path) -> None:
    async with opened(small_config(tmp_path)) as store:
        appended = []
        for i in range(6):
            result = await store.put_message(make_request("T", i % 2, b"m%d" % i, keys=[f"k{i % 3}"],
                                                          uniq=f"UNIQ{i:04d}"))
            appended.append(result.messages[0])
        broker: QueryBroker = FakeQueryBroker(store)
        processor = QueryMessageProcessor(broker)

        found = processor.query_message(_query("T", "k1", 32), None)
        assert found.code == ResponseCode.SUCCESS
        assert sorted(m.body for m in decode_records(found.body)) == [b"m1", b"m4"]
        assert int(found.ext_fields["indexLastUpdatePhyoffset"]) == store.index_last_update_phy_offset

        # maxNum is capped by maxMsgsNumBatch; a unique-key query asks for defaultQueryMaxNum
        broker = FakeQueryBroker(store, BrokerConfig(max_msgs_num_batch=1, default_query_max_num=1))
        one = QueryMessageProcessor(broker).query_message(_query("T", "k1", 32), None)
        assert len(list(decode_records(one.body))) == 1
        uniq = QueryMessageProcessor(broker).query_message(_query("T", "UNIQ0005", 0, unique=True),
                                                           None)
        assert [m.body for m in decode_records(uniq.body)] == [b"m5"]

        missing = processor.query_message(_query("T", "nothing", 32), None)
        assert missing.code == ResponseCode.QUERY_NOT_FOUND and missing.body == b""

        third = appended[3]
        view = RemotingCommand(code=RequestCode.VIEW_MESSAGE_BY_ID, ext_fields={"offset": str(third.physical_offset)})
        record = processor.view_message_by_id(view, None)
        assert record.code == ResponseCode.SUCCESS and decode_record(record.body).body == b"m3"
        past = RemotingCommand(code=RequestCode.VIEW_MESSAGE_BY_ID, ext_fields={"offset": str(store.max_phy_offset)})
        assert processor.view_message_by_id(past, None).code == ResponseCode.SYSTEM_ERROR
