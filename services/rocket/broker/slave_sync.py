"""Master/slave metadata copy (RocketMQ 4.9.8 ``broker/slave/SlaveSynchronize``): a slave
asks its master's main port every ``slaveSyncInterval`` (10 s; the first time after 3 s or
the interval if shorter) for

* 21 GET_ALL_TOPIC_CONFIG — the topic table (applied when its DataVersion changed),
* 201 GET_ALL_SUBSCRIPTIONGROUP_CONFIG — the subscription groups (same rule),
* 43 GET_ALL_CONSUMER_OFFSET — consumer offsets (replaced wholesale),
* 45 GET_ALL_DELAY_OFFSET — delayed-delivery progress (replaced wholesale),
* 60 GET_TIMER_CHECK_POINT — the timer wheel's read time (RocketMQ 5 ``syncTimerCheckPoint``;
  adopted once this slave's CommitLog reaches the master's end at the time of the answer),
* 3005 AUTH_LIST_USER and 3010 AUTH_LIST_ACL — users and ACLs (replaced wholesale, written
  durably when they changed; ``rocket.auth.sync``),

so that a promoted slave serves consumers where they were and delivers
delayed messages from where the master stopped. A controller-mode master also writes its
topic, subscription-group and offset changes into the CommitLog
(:mod:`rocket.broker.metadata.replication`); the records a slave applies while a round runs
are applied again after it, so the round's older snapshots never undo them. Each step fails on its own
(logged once per distinct error) and is retried at the next round.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from rocket.auth.sync import fetch_auth_metadata
from rocket.protocol import DataVersion, SubscriptionGroupConfig, TopicConfig, loads_lenient
from rocket.remoting import RemotingClient, RemotingCommand, RemotingError, RequestCode, ResponseCode
from rocket.runtime import LoopService

if TYPE_CHECKING:
    from rocket.auth.store import AuthMetadataStore
    from rocket.broker.metadata import BrokerMetadata
    from rocket.broker.schedule import ScheduleMessageService
    from rocket.store.timer import TimerMessageStore

log = logging.getLogger("rocket.broker.slave_sync")

FIRST_DELAY = 3.0
#: Seconds between checks for the master's address while it is unknown.
UNKNOWN_MASTER_POLL = 1.0


class SlaveSyncBroker(Protocol):
    """What the copy writes into: the broker's metadata (topic, subscription-group and consumer-offset
    tables) and its delayed delivery (delay offsets). ``BrokerController`` satisfies it."""

    metadata: BrokerMetadata
    schedule: ScheduleMessageService
    timer: TimerMessageStore
    auth_store: AuthMetadataStore


class SlaveSynchronize(LoopService):
    """Copies the master's metadata into this slave; see the module doc.

    ``broker``: where the copies go (read at each round). ``master_address()``: the master's
    remoting address ``host:port``, None while unknown (the round is skipped). ``period``:
    seconds between rounds (``slaveSyncInterval`` / 1000); ``timeout``: seconds per request;
    ``first_delay``: seconds before the first round after each start (at most ``period``).
    ``running``/``start``/``stop`` run the periodic copy (:class:`~rocket.runtime.LoopService`).
    """

    task_name = "ha-config-sync"

    def __init__(self, broker: SlaveSyncBroker, master_address: Callable[[], str | None], *, period: float,
                 timeout: float = 3.0, first_delay: float = FIRST_DELAY) -> None:
        self.broker = broker
        self.master_address = master_address
        self.period = period
        self.first_delay = min(first_delay, self.period)
        self.timeout = timeout
        self.client = RemotingClient(connect_timeout=timeout)
        self.rounds = 0
        self.last_success = 0.0
        self.last_error = ""

    async def stop(self) -> None:
        """Stop copying and close the connection to the master."""
        await super().stop()
        await self.client.close()

    async def _run(self) -> None:
        await asyncio.sleep(self.first_delay)
        while True:
            try:
                await self.sync_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("config sync from the master failed")
            # while the master is unknown, look again every second: its first copy comes soon after
            await asyncio.sleep(self.period if self.master_address() else min(self.period, UNKNOWN_MASTER_POLL))

    async def _call(self, addr: str, code: int) -> bytes:
        cmd = RemotingCommand(code=code, language="JAVA")
        resp = await self.client.invoke(addr, cmd, timeout=self.timeout)
        if resp.code != ResponseCode.SUCCESS:
            raise RemotingError(f"code {resp.code}: {resp.remark or ''}")
        return resp.body

    async def sync_once(self) -> bool:
        """One round against the master's main address; True when every step worked."""
        addr = self.master_address()
        if not addr:
            return False
        self.rounds += 1
        replicator = getattr(self.broker, "metadata_replication", None)
        if replicator is not None:
            replicator.open_window()
        try:
            ok = await self._round(addr)
        finally:
            if replicator is not None:
                replicator.close_window()  # records newer than the snapshots win
        if ok:
            self.last_success = asyncio.get_running_loop().time()
            if self.last_error:
                log.info("config sync from master %s works again", addr)
            self.last_error = ""
        return ok

    async def _round(self, addr: str) -> bool:
        ok = True
        for name, code, apply in (
            ("topic configs", RequestCode.GET_ALL_TOPIC_CONFIG, self._apply_topics),
            ("subscription groups", RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, self._apply_groups),
            ("consumer offsets", RequestCode.GET_ALL_CONSUMER_OFFSET, self._apply_offsets),
            ("delay offsets", RequestCode.GET_ALL_DELAY_OFFSET, self._apply_delay_offsets),
            ("timer checkpoint", RequestCode.GET_TIMER_CHECK_POINT, None),
            ("users and ACLs", RequestCode.AUTH_LIST_USER, None),
        ):
            try:
                if apply is None:  # these make their own calls and read their own answers
                    if code == RequestCode.GET_TIMER_CHECK_POINT:
                        await self._sync_timer_checkpoint(addr)
                    else:
                        await self._apply_auth(addr)
                    continue
                body = await self._call(addr, code)
                await apply(body)
            except (RemotingError, ValueError, TypeError, KeyError, OSError) as exc:
                ok = False
                text = f"copying {name} from master {addr} failed: {exc}"
                if text != self.last_error:
                    log.warning("%s", text)
                self.last_error = text
        return ok

    async def _sync_timer_checkpoint(self, addr: str) -> None:
        from rocket.store.timer import TimerCheckpoint

        cmd = RemotingCommand(code=RequestCode.GET_TIMER_CHECK_POINT, language="JAVA")
        resp = await self.client.invoke(addr, cmd, timeout=self.timeout)
        if resp.code != ResponseCode.SUCCESS:
            raise RemotingError(f"code {resp.code}: {resp.remark or ''}")
        master = TimerCheckpoint.decode(resp.body)
        # Without the extension field (an Apache master) the read time is taken as it is.
        need = int(resp.ext_fields.get("commitLogMaxOffset", "0") or 0)
        self.broker.timer.sync_from_master(master, need)

    # -- apply ------------------------------------------------------------------------------------

    async def _apply_topics(self, body: bytes) -> None:
        obj = loads_lenient(body)
        table = obj.get("topicConfigTable") if isinstance(obj, dict) else None
        if not isinstance(table, dict):
            raise ValueError("no topicConfigTable in GET_ALL_TOPIC_CONFIG's answer")
        mgr = self.broker.metadata.topic_configs
        _replace_table(mgr, {str(k): TopicConfig.from_json(v) for k, v in table.items()}, obj.get("dataVersion"))

    async def _apply_groups(self, body: bytes) -> None:
        obj = loads_lenient(body)
        table = obj.get("subscriptionGroupTable") if isinstance(obj, dict) else None
        if not isinstance(table, dict):
            raise ValueError("no subscriptionGroupTable in GET_ALL_SUBSCRIPTIONGROUP_CONFIG's answer")
        mgr = self.broker.metadata.subscription_groups
        _replace_table(mgr, {str(k): SubscriptionGroupConfig.from_json(v) for k, v in table.items()},
                       obj.get("dataVersion"))

    async def _apply_auth(self, addr: Any) -> None:
        metadata = await fetch_auth_metadata(self.client, str(addr), self.timeout)
        store = self.broker.auth_store
        if await asyncio.to_thread(store.replace_all, metadata):
            log.info("users and ACLs copied from master %s", addr)

    async def _apply_offsets(self, body: bytes) -> None:
        self.broker.metadata.consumer_offsets.replace_all(body)

    async def _apply_delay_offsets(self, body: bytes) -> None:
        obj = loads_lenient(body)
        table = obj.get("offsetTable", {}) if isinstance(obj, dict) else None
        if not isinstance(table, dict):
            raise ValueError("no offsetTable in GET_ALL_DELAY_OFFSET's answer")
        schedule = self.broker.schedule
        new = {int(k): int(v) for k, v in table.items()}
        if new != schedule.delay_offsets:
            schedule.update_offsets(new)
            await schedule.persist()


def _replace_table(mgr: Any, table: dict[str, Any], version: Any) -> None:
    """Make ``mgr`` (a topic or subscription-group manager) hold exactly ``table`` with the
    master's DataVersion; nothing happens when the versions already match."""
    master_version = DataVersion.from_json(version) if isinstance(version, dict) else None
    if master_version is not None and master_version == mgr.data_version:
        return
    current = mgr.all()
    changed = [cfg for name, cfg in table.items() if current.get(name) != cfg]
    gone = [name for name in current if name not in table]
    if changed:
        mgr.put_many(changed)
    if gone:
        mgr.delete_many(gone)
    if master_version is not None:
        mgr.data_version = master_version
