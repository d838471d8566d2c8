"""Master/slave replication (reference B7) with RocketMQ 5-style epochs and manual failover.

* ``protocol`` — the wire format: 8-byte reports, ``[offset][size][data]`` transfers, the epoch handshake;
* ``master`` — :class:`HAService`: serves slaves, SYNC_MASTER waits;
* ``slave`` — :class:`HAClient`: replicates, truncates a divergent tail first;
* ``sync`` — :class:`SlaveSynchronize`: topics, groups and offsets copied every 10 s;
* ``manager`` — :class:`ReplicationManager`: roles, epochs, promotion and demotion;
* ``metrics`` — ``rocketmq_broker_ha_*``.
"""

from rocket.broker.ha.manager import ReplicationManager, RoleChangeError, apply_persisted_role, ha_state_path
from rocket.broker.ha.master import HAService, SyncWaiters
from rocket.broker.ha.protocol import HAProtocolError
from rocket.broker.ha.slave import HAClient, HARefusedError
from rocket.broker.ha.sync import SlaveSynchronize

__all__ = [
    "HAClient",
    "HAProtocolError",
    "HARefusedError",
    "HAService",
    "ReplicationManager",
    "RoleChangeError",
    "SlaveSynchronize",
    "SyncWaiters",
    "apply_persisted_role",
    "ha_state_path",
]
