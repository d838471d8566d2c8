"""Master/slave replication of the CommitLog, with RocketMQ 5-style epochs (RocketMQ's ``store/ha``).

* ``protocol`` — the wire format: 8-byte reports, ``[offset][size][data]`` transfers, the epoch handshake;
* ``master`` — :class:`HAService` (``DefaultHAService`` + ``HAConnection`` + ``GroupTransferService``):
  serves slaves, SYNC_MASTER waits;
* ``slave`` — :class:`HAClient`: replicates, truncates a divergent tail first;
* ``epoch`` — :class:`EpochFile` (``EpochFileCache``) and the consistent-point search;
* ``host`` — :class:`HAHost` / :class:`HAConfig`: what replication needs from the broker running it;
* ``metrics`` — ``rocketmq_broker_ha_*``.

This package depends on the store (and ``rocket.remoting`` for address parsing) only. The broker's
side — roles, promotion and demotion, registration — is :mod:`rocket.broker.replicas`; the
metadata copy of a slave is :mod:`rocket.broker.slave_sync`.
"""

from rocket.store.ha.epoch import EpochEntry, EpochFile, EpochFileError
from rocket.store.ha.host import HAConfig, HAHost
from rocket.store.ha.master import HAService, SyncWaiters
from rocket.store.ha.protocol import HAProtocolError
from rocket.store.ha.slave import HAClient, HARefusedError

__all__ = [
    "EpochEntry",
    "EpochFile",
    "EpochFileError",
    "HAClient",
    "HAConfig",
    "HAHost",
    "HAProtocolError",
    "HARefusedError",
    "HAService",
    "SyncWaiters",
]
