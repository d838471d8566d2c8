"""Topic names and topic creation on the broker side.

* :func:`validate_topic`: RocketMQ's rule, ``^[%|a-zA-Z0-9_-]+$`` and at most
  127 characters (``TopicValidator``).
* System topics: created at start-up like RocketMQ's ``TopicConfigManager``
  (``TBW102`` with perm 7 when ``autoCreateTopicEnable``, ``SELF_TEST_TOPIC``,
  ``OFFSET_MOVED_EVENT``, ``SCHEDULE_TOPIC_XXXX``, and topics named after the
  cluster and the broker group so admin tools can route to them).
* :class:`TopicManager`: auto-creation in the send path (from a template topic
  with the INHERIT bit, ``TopicConfigManager.createTopicInSendMessageMethod``) and for retry/dead-letter topics. It
  works on the store's ``topic_configs`` table and calls ``on_created`` after a
  creation so the broker registers with its NameServers at once.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from rocket.message import MAX_TOPIC_LENGTH
from rocket.protocol.codes import PERM_INHERIT, PERM_READ, PERM_WRITE
from rocket.protocol.topic import AUTO_CREATE_TOPIC_KEY_TOPIC, RETRY_GROUP_TOPIC_PREFIX

if TYPE_CHECKING:
    from rocket.broker.config import BrokerConfig
    from rocket.broker.metadata import TopicConfigManager
    from rocket.protocol import TopicConfig

log = logging.getLogger("rocket.broker")

SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
BENCHMARK_TOPIC = "BenchmarkTest"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
RMQ_SYS_TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
RMQ_SYS_TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
RMQ_SYS_TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"

SYSTEM_TOPICS = frozenset(
    {
        AUTO_CREATE_TOPIC_KEY_TOPIC,
        SELF_TEST_TOPIC,
        BENCHMARK_TOPIC,
        OFFSET_MOVED_EVENT,
        SCHEDULE_TOPIC,
        RMQ_SYS_TRANS_HALF_TOPIC,
        RMQ_SYS_TRANS_OP_HALF_TOPIC,
        RMQ_SYS_TRACE_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
    }
)
#: Producers may not send to these (``TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET``).
NOT_ALLOWED_SEND_TOPICS = frozenset(
    {SCHEDULE_TOPIC, RMQ_SYS_TRANS_HALF_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC}
)

_VALID = re.compile(r"^[%|a-zA-Z0-9_-]+$")


def validate_topic(topic: str) -> str | None:
    """None when ``topic`` is a legal name, else the reason (RocketMQ's wording)."""
    if not topic or not topic.strip():
        return "The specified topic is blank."
    if not _VALID.match(topic):
        return f"The specified topic[{topic}] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    if len(topic) > MAX_TOPIC_LENGTH:
        return f"The specified topic is longer than topic max length {MAX_TOPIC_LENGTH}."
    return None


def is_system_topic(topic: str, cluster_name: str = "") -> bool:
    """RocketMQ's system topics (and the cluster-name topic)."""
    return topic in SYSTEM_TOPICS or topic.startswith("rmq_sys_") or (bool(cluster_name) and topic == cluster_name)


def is_writeable(perm: int) -> bool:
    """The WRITE bit (2)."""
    return bool(perm & PERM_WRITE)


def is_readable(perm: int) -> bool:
    """The READ bit (4)."""
    return bool(perm & PERM_READ)


def is_inherited(perm: int) -> bool:
    """The INHERIT bit (1): the topic is a template for auto-creation."""
    return bool(perm & PERM_INHERIT)


class TopicManager:
    """Topic creation rules on top of the store's :class:`TopicConfigManager`
    (``table()`` returns it; read at each use so the store may replace it).

    ``on_created()`` is called (on the loop) after a topic was created, so
    the broker can re-register with its NameServers.
    """

    def __init__(
        self,
        table: Callable[[], TopicConfigManager],
        config: BrokerConfig,
        topic_config_factory: Callable[..., TopicConfig],
        on_created: Callable[[], None] | None = None,
    ) -> None:
        self._table = table
        self.config = config
        self._new = topic_config_factory
        self.on_created = on_created

    @property
    def table(self) -> TopicConfigManager:
        """The store's topic table."""
        return self._table()

    def get(self, topic: str) -> TopicConfig | None:
        """The config of ``topic``, if it exists."""
        return self.table.get(topic)

    def init_system_topics(self, schedule_queue_nums: int) -> None:
        """Create the system topics RocketMQ creates at start-up (idempotent)."""
        cfg = self.config
        wanted: list[TopicConfig] = [
            self._new(SELF_TEST_TOPIC, read_queue_nums=1, write_queue_nums=1),
            self._new(OFFSET_MOVED_EVENT, read_queue_nums=1, write_queue_nums=1),
            self._new(
                SCHEDULE_TOPIC,
                read_queue_nums=schedule_queue_nums,
                write_queue_nums=schedule_queue_nums,
                perm=PERM_READ | PERM_WRITE,
            ),
        ]
        if cfg.auto_create_topic_enable:
            wanted.append(
                self._new(
                    AUTO_CREATE_TOPIC_KEY_TOPIC,
                    read_queue_nums=cfg.default_topic_queue_nums,
                    write_queue_nums=cfg.default_topic_queue_nums,
                    perm=PERM_INHERIT | PERM_READ | PERM_WRITE,
                )
            )
        cluster_perm = PERM_INHERIT | (PERM_READ | PERM_WRITE if cfg.cluster_topic_enable else 0)
        wanted.append(self._new(cfg.broker_cluster_name, read_queue_nums=16, write_queue_nums=16, perm=cluster_perm))
        broker_perm = PERM_INHERIT | (PERM_READ | PERM_WRITE if cfg.broker_topic_enable else 0)
        wanted.append(self._new(cfg.broker_name, read_queue_nums=1, write_queue_nums=1, perm=broker_perm))
        missing = []
        for tc in wanted:
            old = self.table.get(tc.topic_name)
            if old is None or (
                old.read_queue_nums,
                old.write_queue_nums,
                old.perm,
            ) != (tc.read_queue_nums, tc.write_queue_nums, tc.perm):
                missing.append(tc)
        if missing:
            self.table.put_many(missing)

    def _created(self, tc: TopicConfig, why: str) -> TopicConfig:
        log.info(
            "created topic %s (%s): %d/%d queues, perm %d",
            tc.topic_name,
            why,
            tc.read_queue_nums,
            tc.write_queue_nums,
            tc.perm,
        )
        if self.on_created is not None:
            self.on_created()
        return tc

    def create_in_send(self, topic: str, default_topic: str, client_queue_nums: int, topic_sys_flag: int = 0) -> (
        TopicConfig | None
    ):
        """Find ``topic`` or create it from the template ``default_topic``.

        The template must exist and have the INHERIT bit (TBW102 counts as
        non-inheritable when ``autoCreateTopicEnable`` is off). Queue count =
        min(``client_queue_nums``, template's write queues). Returns None when
        the topic neither exists nor may be created.
        """
        existing = self.table.get(topic)
        if existing is not None:
            return existing
        template = self.table.get(default_topic) if default_topic else None
        if template is None:
            if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                return self.create_in_send_back(topic, 1, PERM_READ | PERM_WRITE, topic_sys_flag)
            return None
        perm = template.perm
        if default_topic == AUTO_CREATE_TOPIC_KEY_TOPIC and not self.config.auto_create_topic_enable:
            perm = PERM_READ | PERM_WRITE
        if not is_inherited(perm):
            return None
        queue_nums = min(client_queue_nums, template.write_queue_nums)
        if queue_nums <= 0:
            return None
        tc = self._new(
            topic,
            read_queue_nums=queue_nums,
            write_queue_nums=queue_nums,
            perm=perm & ~PERM_INHERIT,
            topic_sys_flag=topic_sys_flag,
        )
        self.table.put(tc)
        return self._created(tc, f"auto-created from {default_topic}")

    def create_in_send_back(self, topic: str, queue_nums: int, perm: int, topic_sys_flag: int = 0) -> TopicConfig:
        """Find or create a retry or dead-letter topic with ``queue_nums`` queues."""
        existing = self.table.get(topic)
        if existing is not None:
            return existing
        tc = self._new(
            topic,
            read_queue_nums=queue_nums,
            write_queue_nums=queue_nums,
            perm=perm,
            topic_sys_flag=topic_sys_flag,
        )
        self.table.put(tc)
        return self._created(tc, "retry/dead-letter")
