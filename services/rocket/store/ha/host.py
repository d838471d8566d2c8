"""What replication needs from the broker that runs it: :class:`HAHost` and :class:`HAConfig`.

The HA service (master side) and the HA client (slave side) belong to the
store layer, as RocketMQ's ``DefaultHAService`` and ``HAClient`` live in its
``store/ha`` module: they read and append CommitLog bytes and keep the epoch
file. The few things that are the broker's — its identity and role (which
change at run time on promotion and demotion), where the master is, the
metrics — come in through these two structural interfaces. The broker's
:class:`~rocket.broker.replicas.ReplicationManager` satisfies :class:`HAHost`
and its :class:`~rocket.broker.config.BrokerConfig` satisfies :class:`HAConfig`;
nothing under ``rocket.store.ha`` imports ``rocket.broker``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from rocket.remoting.tls import ClientTls, ServerTls
    from rocket.store.api import BrokerRole
    from rocket.store.ha.epoch import EpochFile
    from rocket.store.ha.metrics import HAMetrics
    from rocket.store.message_store import DefaultMessageStore


class HAConfig(Protocol):
    """The broker settings replication reads, under RocketMQ's names (``BrokerConfig`` and
    ``MessageStoreConfig`` keys). Durations are milliseconds, sizes bytes."""

    @property
    def broker_name(self) -> str:
        """``brokerName``: the broker group; a slave replicates only from its own group's master."""
        ...

    @property
    def broker_id(self) -> int:
        """``brokerId``: 0 on a master, ≥ 1 on a slave."""
        ...

    @property
    def broker_role(self) -> BrokerRole:
        """``brokerRole``: ASYNC_MASTER, SYNC_MASTER or SLAVE (changes on promotion/demotion)."""
        ...

    @property
    def broker_addr(self) -> str:
        """This broker's remoting address ``ip:port`` (sent in the HA handshake)."""
        ...

    @property
    def ha_send_heartbeat_interval(self) -> int:
        """``haSendHeartbeatInterval`` (ms): longest silence on a replication connection."""
        ...

    @property
    def ha_housekeeping_interval(self) -> int:
        """``haHousekeepingInterval`` (ms): a connection silent this long is dropped."""
        ...

    @property
    def ha_transfer_batch_size(self) -> int:
        """``haTransferBatchSize`` (bytes): most CommitLog bytes per transfer."""
        ...

    @property
    def ha_slave_fallbehind_max(self) -> int:
        """``haSlaveFallbehindMax`` (bytes): a slave further behind is not in sync."""
        ...

    @property
    def slave_timeout(self) -> int:
        """``slaveTimeout`` (ms): how long a SYNC_MASTER send waits for a slave."""
        ...


class HAHost(Protocol):
    """The broker side of replication, as :class:`~rocket.store.ha.master.HAService` and
    :class:`~rocket.store.ha.slave.HAClient` see it."""

    @property
    def config(self) -> HAConfig:
        """The broker's settings (role and id change at run time)."""
        ...

    @property
    def store(self) -> DefaultMessageStore:
        """The message store whose CommitLog is replicated."""
        ...

    @property
    def epoch_file(self) -> EpochFile:
        """This broker's epoch file (``rocket.store.ha.epoch``)."""
        ...

    @property
    def metrics(self) -> HAMetrics:
        """Counters and histograms of ``rocketmq_broker_ha_*``."""
        ...

    @property
    def is_master(self) -> bool:
        """This broker is its group's master now (a slave refuses slaves)."""
        ...

    def master_ha_address(self) -> str | None:
        """On a slave: the master's HA address ``host:port`` to replicate from; None while unknown."""
        ...

    def sign_hello(self, hello: dict[str, Any]) -> dict[str, Any]:
        """The slave's handshake hello as sent (signed when ACL is on, ``rocket.auth.ha``)."""
        ...

    def check_slave(self, hello: dict[str, Any] | None) -> str | None:
        """On a master: None when a slave with this hello (None: a plain slave) may replicate,
        else why not (ACL, ``rocket.auth.ha``)."""
        ...

    @property
    def server_tls(self) -> ServerTls | None:
        """TLS of the HA port (the broker's ``tlsMode``; None: plaintext)."""
        ...

    @property
    def client_tls(self) -> ClientTls | None:
        """TLS of a slave's connection to its master's HA port (``tls.enable``; None: plaintext)."""
        ...
