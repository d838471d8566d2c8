"""Controller mode with real processes on loopback: 3 controllers, a NameServer and one group of
3 brokers (``enableControllerMode``, ``allAckInSyncStateSet``, SYNC_FLUSH). The controllers give
the brokers their ids and elect the master; the master is killed with SIGKILL while a producer
records every acknowledged id; the controllers elect a new master with no operator action and
every acknowledged id is on it (see ``failover_support``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocket.remoting import RemotingClient
from tests.integration.failover_support import controller_group, kill_master_once

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


async def test_master_killed_controllers_elect_no_acknowledged_message_lost(tmp_path: Path) -> None:
    client = RemotingClient()
    try:
        with controller_group(tmp_path) as g:
            r = await kill_master_once(g, "FoT", client)
            print(f"RTO {r.rto:.2f} s, elected after {r.elected:.2f} s, acked {r.acked}, lost {r.lost}, "
                  f"duplicates {r.duplicates}, not ok {r.not_ok}")
            assert r.lost == 0, r
            assert r.rto < 15, r
    finally:
        await client.close()
