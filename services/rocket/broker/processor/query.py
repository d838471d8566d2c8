""":class:`QueryMessageProcessor`: QUERY_MESSAGE (12) and VIEW_MESSAGE_BY_ID (33).

As RocketMQ 4.9.8 ``QueryMessageProcessor``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rocket.protocol.validation import INT_MAX, LONG_MAX
from rocket.remoting import RemotingCommand, RemotingConnection, ResponseCode

if TYPE_CHECKING:
    from rocket.broker.interfaces import QueryBroker


class QueryMessageProcessor:
    """Looks messages up by key (IndexFile) or by physical offset."""

    def __init__(self, broker: QueryBroker) -> None:
        self.broker = broker

    def query_message(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """Messages of ``topic`` whose key (or UNIQ_KEY with ``_UNIQUE_KEY_QUERY``) is ``key``.

        Found → code 0, body = stored records back to back, ext
        ``indexLastUpdateTimestamp``/``indexLastUpdatePhyoffset``. None → 22.
        """
        broker = self.broker
        topic = request.require("topic")
        key = request.require("key")
        max_num = request.require_int("maxNum", bits=32)
        begin = request.require_int("beginTimestamp")
        end = request.require_int("endTimestamp")
        if request.get_bool("_UNIQUE_KEY_QUERY", False):  # maxNum is not the client's to choose then
            max_num = broker.config.default_query_max_num
        elif max_num < 1:
            return request.response(ResponseCode.INVALID_PARAMETER, f"maxNum {max_num} is out of range (1..{INT_MAX})")
        max_num = max(1, min(max_num, broker.config.max_msgs_num_batch))
        records = broker.store.query_message(topic, key, max_num, begin, end)
        ext = {
            "indexLastUpdateTimestamp": broker.store.index_last_update_timestamp,
            "indexLastUpdatePhyoffset": broker.store.index_last_update_phy_offset,
        }
        if not records:
            return request.response(
                ResponseCode.QUERY_NOT_FOUND, "can not find message, maybe time range not correct", ext
            )
        return request.response(ResponseCode.SUCCESS, None, ext, b"".join(records))

    def view_message_by_id(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """The stored record at CommitLog offset ``offset``; code 1 when there is none."""
        offset = request.require_int("offset")
        if offset < 0:
            return request.response(ResponseCode.INVALID_PARAMETER, f"offset {offset} is out of range (0..{LONG_MAX})")
        record = self.broker.store.read_record(offset)
        if record is None:
            return request.response(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}")
        return request.response(ResponseCode.SUCCESS, body=bytes(record))
