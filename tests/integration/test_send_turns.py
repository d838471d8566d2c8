"""A send's answer leaves in the same loop turn as its request (a broker on this event loop, frames
fed to a server connection whose transport records the writes; no sockets, so nothing else can
batch the writes).

ASYNC_FLUSH: the answer to one send is written before ``data_received`` returns (the CommitLog
job of the read runs at its end, and the answer joins the read's write); the 64 sends of one
read are one CommitLog job and one write, answers in request order. SYNC_FLUSH: nothing is
answered in the read; the answers come after the fdatasync that covers the messages.
SYNC_MASTER without a slave: SLAVE_NOT_AVAILABLE, the message stored (the future path). A read
that outlasts the send queue's slice leaves the rest of its sends to later loop turns.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from rocket.broker.config import BrokerConfig
from rocket.broker.controller import BrokerController
from rocket.nameserver.config import NameServerConfig
from rocket.nameserver.server import NameServer
from rocket.remoting import RemotingCommand, ResponseCode
from rocket.remoting.command import FrameDecoder, encode
from rocket.remoting.connection import FlowControl, RemotingConnection
from rocket.store.api import BrokerRole, FlushDiskType
from tests.integration.broker_harness import broker_port
from tests.support import eventually

pytestmark = pytest.mark.timeout(60)

TOPIC = "turns"


class RecordingTransport:
    """Records each ``write`` with what the CommitLog had confirmed at that moment."""

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        self.writes: list[tuple[bytes, int, int]] = []  # (data, committed, flushed)

    def write(self, data: bytes) -> None:
        cl = self.broker.store.commit_log
        self.writes.append((bytes(data), cl.committed, cl.flushed))

    def answers(self) -> list[RemotingCommand]:
        decoder = FrameDecoder()
        return [cmd for data, _, _ in self.writes for cmd in decoder.feed(data)]

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 50000) if name in ("peername", "sockname") else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


def _send_frame(opaque: int, queue_id: int) -> bytes:
    ext = {"a": "turns-producer", "b": TOPIC, "c": "TBW102", "d": "4", "e": str(queue_id), "f": "0",
           "g": str(int(time.time() * 1000)), "h": "0", "i": "WAIT\x01true", "j": "0", "k": "false", "m": "false"}
    return encode(RemotingCommand(code=310, ext_fields=ext, body=b"b" * 1024, opaque=opaque))


async def _with_broker(tmp_path: Path, flush: FlushDiskType, role: BrokerRole = BrokerRole.ASYNC_MASTER) -> Any:
    ns = NameServer(NameServerConfig(host="127.0.0.1", port=0, http_port=0))
    await ns.start()
    cfg = BrokerConfig(broker_name="turns", listen_port=broker_port(), namesrv_addr=f"127.0.0.1:{ns.port}",
                       store_path_root_dir=str(tmp_path / "store"), bind_address="127.0.0.1",
                       vip_channel_enable=False, flush_disk_type=flush, http_port=0, broker_role=role)
    broker = BrokerController(cfg)
    await broker.start()
    broker.metadata.topic_configs.put(broker.new_topic_config(TOPIC, read_queue_nums=4, write_queue_nums=4))
    assert broker.remoting is not None
    conn = RemotingConnection(broker.remoting.processors, role="server", flow_control=FlowControl())
    transport = RecordingTransport(broker)
    conn.connection_made(transport)  # type: ignore[arg-type]
    return ns, broker, conn, transport


async def _stop(ns: NameServer, broker: BrokerController) -> None:
    await broker.shutdown()
    await ns.stop()


async def test_async_flush_answer_is_written_inside_the_read(tmp_path: Path) -> None:
    ns, broker, conn, transport = await _with_broker(tmp_path, FlushDiskType.ASYNC_FLUSH)
    # One slice covers the whole test: with the 10 ms default, a loaded machine ends the slice in
    # the middle of the 64 (CI: 47 answered in the read, 17 in the next turn; the test below).
    broker.send_queue.slice_seconds = 60.0
    try:
        conn.data_received(_send_frame(1, 0))  # the first send creates the file (writer thread)
        await eventually(lambda: len(transport.answers()) == 1, 10, interval=0.005)
        cl = broker.store.commit_log
        jobs = cl.stats.jobs
        transport.writes.clear()
        conn.data_received(_send_frame(2, 1))
        assert len(transport.writes) == 1, "answered in the same call as the read"
        (answer,) = transport.answers()
        assert answer.code == ResponseCode.SUCCESS and answer.opaque == 2
        assert cl.stats.jobs == jobs + 1
        _, committed, _ = transport.writes[0]
        assert committed == cl.append_offset  # written to the file before it was acknowledged

        transport.writes.clear()
        conn.data_received(b"".join(_send_frame(100 + i, i % 4) for i in range(64)))
        assert len(transport.writes) == 1, "64 answers of one read leave with one write"
        answers = transport.answers()
        assert [a.opaque for a in answers] == list(range(100, 164))
        assert all(a.code == ResponseCode.SUCCESS for a in answers)
        assert cl.stats.jobs == jobs + 2  # one CommitLog job for the 64
        offsets = [(int(a.ext_fields["queueId"]), int(a.ext_fields["queueOffset"])) for a in answers]
        assert len(set(offsets)) == 64
    finally:
        await _stop(ns, broker)


async def test_a_read_longer_than_the_slice_is_answered_in_later_turns_in_order(tmp_path: Path) -> None:
    """The send queue's slice (``RequestQueue.slice_seconds``) ends a read's handling so other
    connections get the loop: with a slice of 0 every send of the read waits for a later turn, one
    per turn, and each is answered, in request order, none lost."""
    ns, broker, conn, transport = await _with_broker(tmp_path, FlushDiskType.ASYNC_FLUSH)
    broker.send_queue.slice_seconds = 0.0
    try:
        cl = broker.store.commit_log
        conn.data_received(b"".join(_send_frame(100 + i, i % 4) for i in range(16)))
        assert transport.writes == [] and len(broker.send_queue) == 16, "nothing handled inside the read"
        left = []
        for _ in range(3):
            await asyncio.sleep(0)
            left.append(len(broker.send_queue))
        assert left == [15, 14, 13], "one request a turn"
        await eventually(lambda: len(transport.answers()) == 16, 10, interval=0.002)
        answers = transport.answers()
        assert [a.opaque for a in answers] == list(range(100, 116))
        assert all(a.code == ResponseCode.SUCCESS for a in answers)
        assert sum(broker.store.get_max_offset_in_queue(TOPIC, q) for q in range(4)) == 16
        assert cl.committed == cl.append_offset
    finally:
        await _stop(ns, broker)


async def test_sync_flush_answers_only_after_fdatasync(tmp_path: Path) -> None:
    ns, broker, conn, transport = await _with_broker(tmp_path, FlushDiskType.SYNC_FLUSH)
    try:
        cl = broker.store.commit_log
        syncs = cl.stats.fdatasyncs
        conn.data_received(b"".join(_send_frame(1 + i, i % 4) for i in range(8)))
        assert transport.writes == []  # the job is on the writer thread
        end = cl.append_offset
        await eventually(lambda: len(transport.answers()) == 8, 10, interval=0.002)
        assert [a.opaque for a in transport.answers()] == list(range(1, 9))
        assert all(a.code == ResponseCode.SUCCESS for a in transport.answers())
        for _, committed, flushed in transport.writes:
            assert flushed >= end and committed >= end
        assert cl.stats.fdatasyncs > syncs
    finally:
        await _stop(ns, broker)


async def test_sync_master_without_slave_answers_slave_not_available(tmp_path: Path) -> None:
    ns, broker, conn, transport = await _with_broker(tmp_path, FlushDiskType.ASYNC_FLUSH, BrokerRole.SYNC_MASTER)
    try:
        conn.data_received(_send_frame(7, 0))
        await eventually(lambda: len(transport.answers()) == 1, 10, interval=0.005)
        (answer,) = transport.answers()
        assert answer.opaque == 7 and answer.code == ResponseCode.SLAVE_NOT_AVAILABLE, (
            answer.code, answer.remark)
        assert broker.store.get_max_offset_in_queue(TOPIC, 0) == 1  # stored on the master all the same
    finally:
        await _stop(ns, broker)

