"""Replication protocol details with brokers on one event loop (fast, no subprocesses):
a fresh slave starts at the master's last CommitLog file (HAConnection), a plain 4.x-style slave
(no epoch handshake) is served, a slave of another group is refused, SYNC_MASTER answers
SLAVE_NOT_AVAILABLE without a slave and waits for one otherwise."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from rocket.broker.config import BrokerConfig
from rocket.broker.controller import BrokerController
from rocket.nameserver.config import NameServerConfig
from rocket.nameserver.server import NameServer
from rocket.remoting import RemotingClient, ResponseCode
from rocket.store.api import BrokerRole
from rocket.store.ha.protocol import (
    TransferParser,
    encode_handshake,
    encode_report,
    read_handshake,
)
from tests.integration.broker_harness import RawBroker, broker_port
from tests.support import eventually

pytestmark = pytest.mark.timeout(90)

SEGMENT = 64 * 1024


def _config(root: Path, name: str, namesrv: str, **fields: Any) -> BrokerConfig:
    cfg = BrokerConfig(broker_name="grp", listen_port=broker_port(), namesrv_addr=namesrv,
                       store_path_root_dir=str(root / name), bind_address="127.0.0.1", vip_channel_enable=False,
                       register_name_server_period=1000, ha_send_heartbeat_interval=500, **fields)
    cfg.store_overrides.update({"mappedFileSizeCommitLog": str(SEGMENT), "maxHashSlotNum": "1000",
                                "maxIndexNum": "4000"})
    return cfg


@contextlib.asynccontextmanager
async def _cluster(tmp_path: Path) -> AsyncIterator[tuple[str, RemotingClient]]:
    ns = NameServer(NameServerConfig(host="127.0.0.1", port=0, http_port=0))
    await ns.start()
    client = RemotingClient()
    try:
        yield f"127.0.0.1:{ns.port}", client
    finally:
        await client.close()
        await ns.stop()


@contextlib.asynccontextmanager
async def _broker(cfg: BrokerConfig) -> AsyncIterator[BrokerController]:
    b = BrokerController(cfg)
    await b.start()
    try:
        yield b
    finally:
        await b.shutdown()


async def test_fresh_slave_starts_at_the_masters_last_file(tmp_path: Path) -> None:
    async with _cluster(tmp_path) as (ns, client), _broker(_config(tmp_path, "m", ns)) as master:
        rb = RawBroker(client, master.config.broker_addr)
        for i in range(300):  # ~3.5 files of 64 KiB
            assert (await rb.send("FT", f"m{i:03d}".encode() * 150, queue_id=i % 2)).code == 0
        end = master.store.max_phy_offset
        last_file = end - end % SEGMENT
        assert last_file >= 2 * SEGMENT
        async with _broker(_config(tmp_path, "s", ns, broker_role=BrokerRole.SLAVE, broker_id=1,
                                   slave_read_enable=True)) as slave:
            await eventually(lambda: slave.store.max_phy_offset == master.store.max_phy_offset, 10, interval=0.02)
            assert slave.store.min_phy_offset == last_file
            assert slave.store.read_commit_log(last_file, SEGMENT) == master.store.read_commit_log(last_file, SEGMENT)
            # its queue starts where its data starts: old offsets are gone, new ones are served
            low = slave.store.get_min_offset_in_queue("FT", 0)
            assert low > 0 and slave.store.get_max_offset_in_queue("FT", 0) == master.store.get_max_offset_in_queue(
                "FT", 0)
            assert (await rb.send("FT", b"after", queue_id=0)).code == 0
            await eventually(lambda: slave.store.max_phy_offset == master.store.max_phy_offset, 10, interval=0.02)
            got = await RawBroker(client, slave.config.broker_addr).pull(
                "G", "FT", offset=master.store.get_max_offset_in_queue("FT", 0) - 1)
            assert got.code == ResponseCode.SUCCESS and b"after" in got.body


async def test_plain_slave_and_foreign_group(tmp_path: Path) -> None:
    async with _cluster(tmp_path) as (ns, client), _broker(_config(tmp_path, "m", ns)) as master:
        rb = RawBroker(client, master.config.broker_addr)
        for i in range(5):
            assert (await rb.send("PT", f"p{i}".encode())).code == 0
        host, port = "127.0.0.1", master.ha.service.port
        assert port is not None
        # a RocketMQ 4.x-style slave: just an 8-byte report, then transfers
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(encode_report(0))
        parser = TransferParser()
        got = b""
        while len(got) < master.store.max_phy_offset:
            for offset, data in parser.feed(await asyncio.wait_for(reader.read(65536), 5)):
                assert offset == len(got)
                got += data
        assert got == master.store.read_commit_log(0, SEGMENT)
        await eventually(lambda: any(c.ack_offset == 0 and not c.handshake for c in master.ha.service.connections),
                         10, interval=0.02)
        writer.close()
        # a slave of another group is refused in the handshake
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(encode_handshake({"brokerName": "other", "brokerAddr": "x:1", "brokerId": 1, "epochs": []}))
        reply = await asyncio.wait_for(read_handshake(reader), 5)
        assert reply["ok"] is False and "other" in reply["error"]
        writer.close()


async def test_a_commit_is_written_to_the_slave_in_its_own_loop_turn(tmp_path: Path) -> None:
    """The commit listener writes the new CommitLog bytes to a streaming slave itself (before the
    reput), not the sender task in a later loop turn: under load a turn takes milliseconds, and
    a SYNC_MASTER send waits for the slave."""
    async with _cluster(tmp_path) as (ns, client), _broker(_config(tmp_path, "m", ns)) as master:
        rb = RawBroker(client, master.config.broker_addr)
        assert (await rb.send("CT", b"first")).code == 0
        service = master.ha.service
        reader, writer = await asyncio.open_connection("127.0.0.1", service.port)
        writer.write(encode_report(0))
        await eventually(lambda: any(c.streaming and c.transfer_offset == master.store.max_phy_offset
                                     for c in service.connections), 10, interval=0.02)
        seen: list[tuple[int, list[int], int]] = []
        master.store.add_commit_listener(lambda end: seen.append(
            (end, [c.transfer_offset for c in service.connections], master.store.reput_from_offset)))
        got = 0
        for i in range(20):
            assert (await rb.send("CT", f"m{i}".encode() * 50)).code == 0
            got += len(await asyncio.wait_for(reader.read(65536), 5))
        assert len(seen) >= 1 and all(offsets == [end] for end, offsets, _ in seen), seen
        assert any(reput < end for end, _, reput in seen), "the listeners ran after the reput"
        writer.close()


async def test_a_slave_that_does_not_read_holds_a_bounded_buffer_on_the_master(tmp_path: Path) -> None:
    """Commits write to slaves themselves, but never past the sender's high-water mark: a slave
    that reports and then reads nothing leaves at most that mark plus one transfer unsent."""
    async with _cluster(tmp_path) as (ns, client), _broker(_config(tmp_path, "m", ns)) as master:
        rb = RawBroker(client, master.config.broker_addr)
        service = master.ha.service
        _unread, writer = await asyncio.open_connection("127.0.0.1", service.port)
        writer.write(encode_report(0))
        await eventually(lambda: any(c.streaming for c in service.connections), 10, interval=0.02)
        conn = service.connections[0]
        body = b"x" * 32 * 1024
        most = 0
        for _ in range(400):  # 12.8 MiB, far more than the socket buffers take
            assert (await rb.send("BT", body)).code == 0
            most = max(most, conn.writer.transport.get_write_buffer_size())
        bound = 4 * 1024 * 1024 + master.config.ha_transfer_batch_size + 64
        assert 0 < most <= bound, (most, bound)
        writer.close()


async def test_a_slave_reports_written_bytes_before_its_reput(tmp_path: Path) -> None:
    """The slave reports replicated bytes from its store's commit listener, in the loop turn they
    were written and before its reput dispatches them (a SYNC_MASTER send waits for the report)."""
    sync = BrokerRole.SYNC_MASTER
    async with _cluster(tmp_path) as (ns, client), _broker(_config(tmp_path, "m", ns, broker_role=sync)) as master:
        rb = RawBroker(client, master.config.broker_addr)
        async with _broker(_config(tmp_path, "s", ns, broker_role=BrokerRole.SLAVE, broker_id=1)) as slave:
            await eventually(lambda: bool(master.ha.service.active), 10, interval=0.02)
            assert (await rb.send("RT", b"first")).code == ResponseCode.SUCCESS
            ha_client = slave.ha.client
            seen: list[tuple[int, int, int]] = []
            slave.store.add_commit_listener(
                lambda end: seen.append((end, ha_client.reported_offset, slave.store.reput_from_offset)))
            answers = await asyncio.gather(*(rb.send("RT", f"r{i}".encode() * 40) for i in range(50)))
            assert {a.code for a in answers} == {ResponseCode.SUCCESS}
            assert seen and all(reported == end and reput < end for end, reported, reput in seen), seen


async def test_sync_master_needs_a_slave(tmp_path: Path) -> None:
    sync = BrokerRole.SYNC_MASTER
    async with _cluster(tmp_path) as (ns, client), _broker(_config(tmp_path, "m", ns, broker_role=sync,
                                                                  slave_timeout=500)) as master:
        rb = RawBroker(client, master.config.broker_addr)
        alone = await rb.send("ST", b"no slave")
        assert alone.code == ResponseCode.SLAVE_NOT_AVAILABLE and alone.ext_fields.get("msgId")  # stored anyway
        async with _broker(_config(tmp_path, "s", ns, broker_role=BrokerRole.SLAVE, broker_id=1)) as slave:
            await eventually(lambda: bool(master.ha.service.active), 10, interval=0.02)
            answers = await asyncio.gather(*(rb.send("ST", f"s{i}".encode()) for i in range(200)))
            assert {a.code for a in answers} == {ResponseCode.SUCCESS}
            # acknowledged = the slave reported (so holds) everything up to the master's end
            assert slave.store.max_phy_offset == master.store.max_phy_offset
            # the slave goes away: SLAVE_NOT_AVAILABLE at once (stored on the master all the same)
            await slave.ha.client.stop()
            await eventually(lambda: not master.ha.service.connections, 10, interval=0.02)
            started = time.monotonic()
            late = await rb.send("ST", b"after")
            assert late.code == ResponseCode.SLAVE_NOT_AVAILABLE and time.monotonic() - started < 0.4


async def test_a_slave_told_of_a_newer_master_epoch_never_acknowledges_the_old_master(tmp_path: Path) -> None:
    """The epoch check a controller-mode slave relies on (``HAClient.min_master_epoch``): once the
    controllers announced a master epoch above the old master's, the slave refuses the old master
    in the HA handshake, so the old master's SYNC_MASTER sends get no acknowledgement from it."""
    sync = BrokerRole.SYNC_MASTER
    async with _cluster(tmp_path) as (ns, client), _broker(_config(tmp_path, "m", ns, broker_role=sync,
                                                                  slave_timeout=500)) as master:
        rb = RawBroker(client, master.config.broker_addr)
        async with _broker(_config(tmp_path, "s", ns, broker_role=BrokerRole.SLAVE, broker_id=1)) as slave:
            await eventually(lambda: bool(master.ha.service.active), 10, interval=0.02)
            assert (await rb.send("EP", b"acked")).code == ResponseCode.SUCCESS
            old_epoch = master.ha.epoch_file.last_epoch
            end = slave.store.max_phy_offset
            await slave.ha.client.stop()
            slave.ha.client.min_master_epoch = old_epoch + 1  # a newer master was elected
            slave.ha.client.start()
            await eventually(lambda: slave.ha.client.state == "refused", 10, interval=0.02)
            assert "has been replaced" in slave.ha.client.last_error
            late = await rb.send("EP", b"not acked")
            assert late.code in (ResponseCode.SLAVE_NOT_AVAILABLE, ResponseCode.FLUSH_SLAVE_TIMEOUT), late.code
            assert slave.store.max_phy_offset == end  # nothing of the old master's stream was taken


async def test_a_slave_drops_a_master_silent_for_the_housekeeping_interval(tmp_path: Path) -> None:
    """``haHousekeepingInterval`` without a byte from the master (no data, no heartbeat: here the
    master's heartbeat interval is far longer) ends the slave's session with a TimeoutError, and
    the slave connects again and goes on replicating."""
    async with _cluster(tmp_path) as (ns, client), _broker(_config(tmp_path, "m", ns)) as master:
        master.config.ha_send_heartbeat_interval = 120_000
        rb = RawBroker(client, master.config.broker_addr)
        slave_cfg = _config(tmp_path, "s", ns, broker_role=BrokerRole.SLAVE, broker_id=1,
                            ha_housekeeping_interval=1000)
        async with _broker(slave_cfg) as slave:
            ha_client = slave.ha.client
            await eventually(lambda: ha_client.state == "transferring", 10, interval=0.02)
            assert (await rb.send("HK", b"before")).code == ResponseCode.SUCCESS
            started = time.monotonic()
            await eventually(lambda: "nothing from the master for 1 s" in (ha_client.last_error or ""), 10,
                             interval=0.02)
            assert time.monotonic() - started < 4.0  # 1 s, checked every 0.25 s
            assert "TimeoutError" in ha_client.last_error
            await eventually(lambda: ha_client.state == "transferring", 15, interval=0.05)
            assert (await rb.send("HK", b"after")).code == ResponseCode.SUCCESS
            await eventually(lambda: slave.store.max_phy_offset == master.store.max_phy_offset, 10, interval=0.02)
