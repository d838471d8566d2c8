"""What the broker's parts need of the broker: narrow ``typing.Protocol`` interfaces.

Request processors, the transaction service and the HTTP side are handed the
:class:`~rocket.broker.controller.BrokerController`, but each is typed against
the Protocol below that lists only what it uses (the replication manager's is
``ReplicationBroker`` in :mod:`rocket.broker.replicas`). So none of them imports the
controller (which imports them: no import cycle), and each can be unit-tested
against a small fake. The controller satisfies every Protocol structurally;
mypy checks that where it constructs the parts.

This module imports only leaf modules (configuration, store, managers), never
the controller, a processor, the transaction service or the replication manager.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from rocket.auth.http import HttpAuth
    from rocket.broker.client_manager import ConsumerManager, ProducerManager
    from rocket.broker.config import BrokerConfig
    from rocket.broker.inner import MessageInner
    from rocket.broker.locks import RebalanceLockManager
    from rocket.broker.long_polling import PullRequestHoldService
    from rocket.broker.metadata import BrokerMetadata
    from rocket.broker.metadata.replication import MetadataReplicator
    from rocket.broker.metrics import BrokerMetrics
    from rocket.broker.schedule import ScheduleMessageService
    from rocket.broker.stats import BrokerStats, ConsumeStatRow
    from rocket.broker.topics import TopicManager
    from rocket.protocol import SubscriptionGroupConfig, TopicConfig
    from rocket.store import DefaultMessageStore
    from rocket.store.api import BrokerRole, PutMessageBatch, PutMessageRequest, PutMessageResult

    #: The send path's completion callback (``BrokerController.put_batch_nowait``): called once with
    #: the store's result, or (SYNC_MASTER) with the finished future of the replicated result.
    PutDone = Callable[[PutMessageResult | asyncio.Future[PutMessageResult]], object]


class MessageQueryStore(Protocol):
    """The store as QUERY_MESSAGE and VIEW_MESSAGE_BY_ID read it (``DefaultMessageStore``)."""

    @property
    def index_last_update_timestamp(self) -> int:
        """Store timestamp (ms) of the newest indexed message."""
        ...

    @property
    def index_last_update_phy_offset(self) -> int:
        """CommitLog offset of the newest indexed message."""
        ...

    def query_message(self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int) -> list[bytes]:
        """Stored records of ``topic`` whose key is ``key``, at most ``max_num``."""
        ...

    def read_record(self, physical_offset: int) -> bytes | None:
        """The stored record at a CommitLog offset, or None."""
        ...


class QueryBroker(Protocol):
    """What :class:`~rocket.broker.processor.query.QueryMessageProcessor` uses."""

    @property
    def config(self) -> BrokerConfig:
        """The broker's settings (``defaultQueryMaxNum``, ``maxMsgsNumBatch``)."""
        ...

    @property
    def store(self) -> MessageQueryStore:
        """The message store's lookups."""
        ...


class ReplicationView(Protocol):
    """What request processors, the transaction service and the HTTP side ask of the replication
    manager (:class:`~rocket.broker.replicas.ReplicationManager`)."""

    @property
    def role_pending(self) -> bool:
        """A send arriving now would have to wait for the role to settle."""
        ...

    @property
    def master_reachable(self) -> bool:
        """On a slave: is the master there?"""
        ...

    async def wait_role_settled(self) -> None:
        """Wait (bounded) until the role is settled."""
        ...

    def refuse_writes(self) -> str | None:
        """Why sends must be refused now, or None."""
        ...

    def suggest_slave(self) -> bool:
        """May a master send slow consumers to a slave?"""
        ...

    def replicated_topic_config(self, topic: str) -> Any:
        """A config for a topic that has replicated data but no config yet, or None."""
        ...

    def status(self) -> dict[str, Any]:
        """Role, epochs and slaves, as JSON."""
        ...

    async def promote(self, broker_role: BrokerRole | str | None = None, *, force: bool = False) -> dict[str, Any]:
        """Become the group's master. Raises ``RoleChangeError``."""
        ...


class HalfMessageSink(Protocol):
    """What the send path tells the transaction service
    (:class:`~rocket.broker.transaction.TransactionalMessageService`)."""

    def ensure_topics(self) -> None:
        """Create the half and op topics when missing."""
        ...

    def on_half_stored(self, inner: MessageInner) -> None:
        """A half message was stored (counted by its real topic)."""
        ...


class BrokerBase(Protocol):
    """Members most parts share: settings, store, metadata, topics."""

    @property
    def config(self) -> BrokerConfig:
        """The broker's settings."""
        ...

    @property
    def store(self) -> DefaultMessageStore:
        """The message store."""
        ...

    @property
    def metadata(self) -> BrokerMetadata:
        """Topic configs, subscription groups, consumer offsets."""
        ...

    @property
    def topics(self) -> TopicManager:
        """Topic creation and lookup."""
        ...

    @property
    def metadata_replication(self) -> MetadataReplicator:
        """Metadata changes written into the CommitLog for the slaves (controller mode)."""
        ...


class BrokerCore(BrokerBase, Protocol):
    """:class:`BrokerBase` plus subscription-group lookup (every request processor below)."""

    def find_subscription_group(self, group: str, auto_create: bool = True) -> SubscriptionGroupConfig | None:
        """A group's config, created with defaults when allowed."""
        ...


class HasConsumers(Protocol):
    """Consumer groups, their subscriptions and connections."""

    @property
    def consumer_manager(self) -> ConsumerManager:
        """The consumer groups."""
        ...


class HasProducers(Protocol):
    """Producer groups and their connections."""

    @property
    def producer_manager(self) -> ProducerManager:
        """The producer groups."""
        ...


class HasReplication(Protocol):
    """Replication state and Prometheus metrics: parts that serve clients see both."""

    shutting_down: bool

    @property
    def ha(self) -> ReplicationView:
        """What the replication manager tells."""
        ...

    @property
    def metrics(self) -> BrokerMetrics:
        """Prometheus metrics."""
        ...


class Puts(Protocol):
    """Storing messages through the broker (replication waits, counters)."""

    async def put_message(self, inner: MessageInner) -> PutMessageResult:
        """Store one message (and wait for replication as the role requires)."""
        ...

    def record_put(self, topic: str, count: int, nbytes: int) -> None:
        """Count stored messages."""
        ...


class TopicAdmin(Protocol):
    """Topic and group administration shared by admin requests and the HTTP API."""

    def consume_stats(self, group: str, topic: str | None = None) -> tuple[list[ConsumeStatRow], float]:
        """Per-queue offsets and lag of a group, and its consume TPS."""
        ...

    async def delete_topic(self, topic: str) -> None:
        """Delete a topic's config, queues and offsets."""
        ...

    @staticmethod
    def new_topic_config(topic: str, **fields: Any) -> TopicConfig:
        """A TopicConfig with the broker's defaults."""
        ...

    async def register_broker_all(self) -> None:
        """Register with every NameServer now."""
        ...


class ClientManageBroker(BrokerCore, HasConsumers, HasProducers, HasReplication, Protocol):
    """What :class:`~rocket.broker.processor.client_manage.ClientManageProcessor` and
    ``ConsumerManageProcessor`` use."""

    async def register_broker_all(self) -> None:
        """Register with every NameServer now (a heartbeat that created a retry topic waits for it)."""
        ...


class PullBroker(BrokerCore, HasConsumers, HasReplication, Protocol):
    """What :class:`~rocket.broker.processor.pull.PullMessageProcessor` uses."""

    @property
    def hold_service(self) -> PullRequestHoldService:
        """Long polling."""
        ...

    def record_get(self, group: str, topic: str, count: int, nbytes: int) -> None:
        """Count messages handed to a consumer group."""
        ...


class SendBroker(BrokerCore, HasReplication, Puts, Protocol):
    """What :class:`~rocket.broker.processor.send.SendMessageProcessor` uses."""

    in_flight_sends: int
    in_flight_send_bytes: int

    @property
    def stats(self) -> BrokerStats:
        """Put and get counters (the send path counts its stored messages there, as ``record_put``)."""
        ...

    @property
    def schedule(self) -> ScheduleMessageService:
        """Delay levels."""
        ...

    @property
    def transaction(self) -> HalfMessageSink:
        """Transactional half messages."""
        ...

    async def put_messages(self, reqs: list[PutMessageRequest]) -> PutMessageResult:
        """Store a batch (store requests to one queue)."""
        ...

    def put_batch_nowait(self, reqs: list[PutMessageRequest], done: PutDone | None = None,
                         ) -> PutMessageResult | asyncio.Future[PutMessageResult] | None:
        """The batch fast path: the store's refusal now, or a future of the result; with ``done``,
        None and ``done`` gets the outcome."""
        ...

    def put_message_batch_nowait(self, batch: PutMessageBatch, done: PutDone | None = None,
                                 ) -> PutMessageResult | asyncio.Future[PutMessageResult] | None:
        """A batch send's messages: the store's refusal now, or a future of the result; with
        ``done``, None and ``done`` gets the outcome."""
        ...

    def put_nowait(self, inners: list[MessageInner], done: PutDone | None = None,
                   ) -> PutMessageResult | asyncio.Future[PutMessageResult] | None:
        """The fast path: a result now, a future, or None when ``done`` gets the outcome."""
        ...


class AdminBroker(BrokerCore, HasConsumers, TopicAdmin, Protocol):
    """What :class:`~rocket.broker.processor.admin.AdminBrokerProcessor` uses."""

    config_version: dict[str, int]

    @property
    def lock_manager(self) -> RebalanceLockManager:
        """Queue locks of orderly consumers."""
        ...

    @property
    def schedule(self) -> ScheduleMessageService:
        """Delay levels and their offsets."""
        ...

    @staticmethod
    def subscription_group_from_json(body: bytes) -> SubscriptionGroupConfig:
        """Parse an UPDATE_AND_CREATE_SUBSCRIPTIONGROUP body."""
        ...

    def runtime_info(self) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO figures."""
        ...

    async def update_config(self, values: dict[str, str]) -> None:
        """Apply and persist UPDATE_BROKER_CONFIG settings."""
        ...


class ToolsBroker(AdminBroker, HasProducers, Protocol):
    """What :class:`~rocket.broker.processor.tools.ToolsAdminProcessor` (mqadmin's commands) uses."""

    @property
    def stats(self) -> BrokerStats:
        """Put/get counters and rates per topic and group."""
        ...

    def offset_table(self) -> dict[tuple[str, str], dict[int, int]]:
        """Committed offsets: ``(group, topic) -> {queueId: offset}``."""
        ...


class HttpBroker(BrokerCore, HasConsumers, HasReplication, TopicAdmin, Protocol):
    """What the broker's HTTP side (:mod:`rocket.broker.http`) uses."""

    @property
    def http_auth(self) -> HttpAuth | None:
        """The credential check of ``/api/v1`` (``rocket.auth.http``), None when open."""
        ...

    @property
    def registered_namesrvs(self) -> list[str]:
        """NameServers that accepted a registration recently."""
        ...

    def readiness(self) -> tuple[bool, list[str]]:
        """``(ready, reasons not ready)``."""
        ...

    def status(self) -> dict[str, Any]:
        """The /api/v1/status document."""
        ...

    def consumer_groups(self) -> list[str]:
        """Known consumer groups."""
        ...

    async def create_topic(self, tc: TopicConfig) -> None:
        """Create or update a topic and register."""
        ...


class TransactionBroker(BrokerBase, HasProducers, HasReplication, Puts, Protocol):
    """What :class:`~rocket.broker.transaction.TransactionalMessageService` uses: the store (half and
    op messages), consumer offsets (its progress), the half and op topics, the role, and the
    producer groups to check back with."""
