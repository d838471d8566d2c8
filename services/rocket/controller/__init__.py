"""The controller: a Raft-replicated service that owns every broker group's master, master epoch
and SyncStateSet, and elects a new master when one dies (RocketMQ 5 *controller mode*, RIP-44).

Run it as ``rocket controller`` (normally 3 peers; see :mod:`rocket.controller.config`), or
inside a NameServer (``rocket nameserver --enable-controller-in-namesrv``: the controller's
requests are then served on the NameServer's port). Modules: :mod:`~rocket.controller.state`
(the replicated state machine and the elect policy, pure), :mod:`~rocket.controller.raft`
(pysyncobj), :mod:`~rocket.controller.heartbeat` (who is alive), :mod:`~rocket.controller.manager`
(request handlers, elections, notifications), :mod:`~rocket.controller.server` (the process),
:mod:`~rocket.controller.http` (probes, metrics, status) and :mod:`~rocket.controller.client`
(:class:`ControllerClient`, what a controller-mode broker or a tool calls: leader discovery,
redirects, the requests below).

The wire protocol is RocketMQ 5's (``RequestCode`` 904 and 1001-1013, ``ResponseCode`` 2000-2014,
JSON headers and fastjson bodies with Apache's field names), so Apache's own controller-mode
broker and ``mqadmin`` (getControllerMetaData, getSyncStateSet, electMaster,
getControllerConfig, updateControllerConfig, cleanBrokerHAMetadata) work against it.

Contract for a controller-mode broker
-------------------------------------
What RocketMQ 5's broker (``ReplicasManager``, ``BrokerOuterAPI``) does, and what ours must do
(``enableControllerMode=true``, ``controllerAddr=host:port;host:port;...``):

1. **Find the leader.** CONTROLLER_GET_METADATA_INFO (1005, no header) to any controller; the
   answer's ``controllerLeaderAddress`` is where every write goes. Repeat every few seconds
   (RocketMQ ``syncControllerMetadataPeriod``, 10 s) and whenever a write is answered
   CONTROLLER_NOT_LEADER (2007), or a request fails to connect.
2. **Get a broker id** (once; kept in the store, RocketMQ's ``brokerIdentity`` files):
   CONTROLLER_GET_NEXT_BROKER_ID (1012: ``clusterName``, ``brokerName``) -> ``nextBrokerId``
   (the first of a group is 1); then CONTROLLER_APPLY_BROKER_ID (1013: ``clusterName``,
   ``brokerName``, ``appliedBrokerId``, ``registerCheckCode`` = ``"<ip:port>;<epoch ms>"``).
   CONTROLLER_BROKER_ID_INVALID (2014): someone else took it, ask for the next id again.
   Re-applying the same id with the same check code succeeds (safe to retry after a crash).
   These ids are *controller* ids (1, 2, 3...); the broker still registers with the NameServers
   as brokerId 0 while master and as its controller id while slave.
3. **Register**: CONTROLLER_REGISTER_BROKER (1003: ``clusterName``, ``brokerName``, ``brokerId``,
   ``brokerAddress`` = its remoting ``ip:port``) after every start. The answer carries the
   alive master (``masterBrokerId``, ``masterAddress``, ``masterEpoch``, ``syncStateSetEpoch``)
   and the SyncStateSet body ``{"syncStateSet": [ids], "syncStateSetEpoch": n}``.
4. **Heartbeat** to *every* controller, not only the leader: BROKER_HEARTBEAT (904, oneway:
   ``clusterName``, ``brokerName``, ``brokerAddr``, ``brokerId``, ``epoch`` = its last epoch,
   ``maxOffset`` = CommitLog max offset, ``confirmOffset``, ``heartbeatTimeoutMills`` (RocketMQ
   ``controllerHeartBeatTimeoutMills``, 10 000), ``electionPriority``) every
   ``brokerHeartbeatInterval`` (RocketMQ 1 000 ms), always on the same connection: the controller treats that
   connection's close as the broker's death. Elections pick the highest (epoch, maxOffset), so
   the figures must be current.
5. **No master yet** (the register answer had none): CONTROLLER_ELECT_MASTER (1002:
   ``clusterName``, ``brokerName``, ``brokerId`` = its own id, ``designateElect=false``). SUCCESS
   or CONTROLLER_MASTER_STILL_EXIST (2011) both name the master (``ElectMasterResponseHeader``:
   ``masterBrokerId``, ``masterAddress``, ``masterEpoch``, ``syncStateSetEpoch``; body
   ``{"brokerMemberGroup": {...}, "syncStateSet": [ids]}``). The group's first election makes
   the first broker that asks the master.
6. **Role changes** arrive as NOTIFY_BROKER_ROLE_CHANGED (1008, oneway, to the broker's
   registered address: ``masterAddress``, ``masterEpoch``, ``syncStateSetEpoch``,
   ``masterBrokerId``; body SyncStateSet). A broker acts only on a ``masterEpoch`` greater than
   the one it knows: master if ``masterBrokerId`` is its own id, else slave of ``masterAddress``
   (truncating to the epoch boundary first). Notifications can be lost, so it also polls
   CONTROLLER_GET_REPLICA_INFO (1004: ``brokerName`` -> ``masterBrokerId``, ``masterAddress``,
   ``masterEpoch``; body SyncStateSet) every ``syncBrokerMetadataPeriod`` (RocketMQ 5 s) and
   applies a newer epoch the same way; an answer without a master means "elect" (step 5);
   CONTROLLER_BROKER_METADATA_NOT_EXIST (2008) means register again (step 3).
7. **The master keeps the SyncStateSet**: when a slave catches up or falls behind
   (``haMaxTimeSlaveNotCatchup``), CONTROLLER_ALTER_SYNC_STATE_SET (1001: ``brokerName``,
   ``masterBrokerId``, ``masterEpoch``; body ``{"syncStateSet": [new ids],
   "syncStateSetEpoch": <the epoch it knows>}``). The set must contain the master and only
   alive, registered ids. SUCCESS answers ``newSyncStateSetEpoch`` and the new set: adopt it.
   CONTROLLER_FENCED_MASTER_EPOCH (2000) / CONTROLLER_INVALID_MASTER (2002): this broker is no
   longer master, stop acknowledging writes and re-read the replica info.
   CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH (2001): re-read the set, then retry.
8. **Fencing is the broker's job**: the controller guarantees that at most one master per group
   and master epoch is ever committed (every change goes through Raft and carries the epoch it
   was decided on), and that no election happens without a controller majority. A master that
   cannot reach a controller majority (heartbeats unanswered / no leader for longer than its
   heartbeat timeout) must assume it was replaced and stop acknowledging writes.

Manual failover is CONTROLLER_ELECT_MASTER with ``designateElect=true`` and the chosen
``brokerId`` (``mqadmin electMaster -a <controller> -c <cluster> -b <id> -bn <brokerName>``):
it succeeds only for an alive member of the SyncStateSet (any alive replica with
``enableElectUncleanMaster``); the controller then notifies the group as in step 6.
"""

from rocket.controller.client import ControllerClient, NoControllerLeaderError, ReplicaInfo
from rocket.controller.config import ConfigError, ControllerConfig, Peer, parse_peers, read_secret
from rocket.controller.manager import ControllerManager
from rocket.controller.server import ControllerServer, serve
from rocket.controller.state import BrokerGroup, DefaultElectPolicy, ReplicasInfoManager

__all__ = [
    "BrokerGroup",
    "ConfigError",
    "ControllerClient",
    "ControllerConfig",
    "ControllerManager",
    "ControllerServer",
    "DefaultElectPolicy",
    "NoControllerLeaderError",
    "Peer",
    "ReplicaInfo",
    "ReplicasInfoManager",
    "parse_peers",
    "read_secret",
    "serve",
]
