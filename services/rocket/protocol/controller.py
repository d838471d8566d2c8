"""Bodies of RocketMQ 5's controller requests (``remoting/protocol/body`` in Apache RocketMQ).

* ``SyncStateSet``: ``{"syncStateSet": [brokerId, ...], "syncStateSetEpoch": n}`` — body of
  ALTER_SYNC_STATE_SET (both ways), REGISTER_BROKER, GET_REPLICA_INFO and NOTIFY_BROKER_ROLE_CHANGED;
* ``BrokerMemberGroup``: ``{"cluster", "brokerName", "brokerAddrs": {brokerId: address}}``;
* ``ElectMasterResponseBody``: ``{"brokerMemberGroup": BrokerMemberGroup | null, "syncStateSet": [ids]}``.

Broker ids are JSON numbers in lists and strings as object keys (standard JSON; fastjson reads
both).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from rocket.protocol.body import BodyError, json_object


def sync_state_set_body(ids: Iterable[int], epoch: int) -> bytes:
    """A ``SyncStateSet`` body (ids sorted)."""
    return orjson.dumps({"syncStateSet": sorted(ids), "syncStateSetEpoch": epoch})


def parse_sync_state_set(body: bytes) -> tuple[set[int], int]:
    """``(ids, epoch)`` from a ``SyncStateSet`` body. Raises :class:`BodyError` when malformed."""
    obj = json_object(body, "SyncStateSet")
    try:
        ids = {int(x) for x in obj.get("syncStateSet") or []}
        epoch = int(obj.get("syncStateSetEpoch", 0))
    except (TypeError, ValueError) as exc:
        raise BodyError(f"bad SyncStateSet body: {exc}") from None
    return ids, epoch


def broker_member_group(cluster: str, broker_name: str, addrs: Mapping[int, str]) -> dict[str, Any]:
    """A ``BrokerMemberGroup`` object."""
    return {"cluster": cluster, "brokerName": broker_name,
            "brokerAddrs": {str(k): v for k, v in sorted(addrs.items())}}


def elect_master_body(member_group: Mapping[str, Any] | None, sync_state_set: Iterable[int]) -> bytes:
    """An ``ElectMasterResponseBody``."""
    return orjson.dumps({"brokerMemberGroup": member_group, "syncStateSet": sorted(sync_state_set)})
