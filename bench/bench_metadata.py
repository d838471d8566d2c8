"""Metadata replication benchmark: what writing consumer-offset commits into the CommitLog for the
slaves (``rocket.broker.metadata.replication``, ``enableMetadataReplication``) costs a
controller-mode master.

One local cluster (``rocket.local.LocalCluster``, loopback, ASYNC_FLUSH): 3 controllers, one
NameServer, one group of a master and a slave with ``allAckInSyncStateSet``. The same master runs
rounds that alternate between ``enableMetadataReplication=true`` and ``false`` (switched at run
time with UPDATE_BROKER_CONFIG), so that load drift on a shared machine hits both alike; the
median round of each counts:

* **two-way** UPDATE_CONSUMER_OFFSET (what our client, mqadmin and the C++ client send):
  ``CONCURRENCY`` requests in flight in a closed loop over 16 queues x 4 groups; commits/s and
  latency p50/p99. With replication on, each answer waits until the slave holds the record that
  carries the commit (commits arriving in one turn of the master's loop share one record);
* master and slave CPU per two-way commit (``/proc``), the figure load on a shared machine
  disturbs least;
* **one-way** UPDATE_CONSUMER_OFFSET (what the Java client's offset store sends): ``ONEWAY_BURST``
  commits written as fast as the socket takes them, then one QUERY_CONSUMER_OFFSET; commits/s the
  master absorbs.

It also prints how many commits each record carried (``/api/v1/ha`` ``metadataReplication``).

Run: ``make bench BENCH=metadata`` or ``python -m bench metadata [--short]``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.bench_broker import _proc_cpu
from rocket.local import LocalCluster, find_free_base_port
from rocket.percentiles import percentile
from rocket.protocol import RequestCode
from rocket.remoting import RemotingClient, RemotingCommand, ResponseCode

TOPIC = "BenchOffsets"
QUEUES = 16
GROUPS = 4
#: Two-way commits in flight (``ROCKET_BENCH_IN_FLIGHT`` overrides).
CONCURRENCY = int(os.environ.get("ROCKET_BENCH_IN_FLIGHT", "64"))
ONEWAY_BURST = 20_000


def _ha(http_port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/api/v1/ha", timeout=2.0) as resp:
        return dict(json.loads(resp.read()))


def _master(state: Any, timeout: float = 60.0) -> tuple[Any, Any]:
    """(master, slave) ``ProcessInfo`` once the master has its slave in the SyncStateSet."""
    deadline = time.monotonic() + timeout
    brokers = [p for p in state.processes if p.kind == "broker"]
    while time.monotonic() < deadline:
        for p in brokers:
            try:
                st = _ha(p.http_port)
            except OSError:
                continue
            cm = st.get("controllerMode") or {}
            if st["brokerRole"] != "SLAVE" and len(cm.get("syncStateSet") or []) >= 2:
                return p, next(b for b in brokers if b is not p)
        time.sleep(0.2)
    raise RuntimeError("no master with a slave in its SyncStateSet")


def _commit(group: int, queue: int, offset: int, *, oneway: bool = False) -> RemotingCommand:
    return RemotingCommand(code=RequestCode.UPDATE_CONSUMER_OFFSET, flag=2 if oneway else 0, ext_fields={
        "consumerGroup": f"CG_BENCH_{group}", "topic": TOPIC, "queueId": str(queue), "commitOffset": str(offset)})


async def _switch(client: RemotingClient, addr: str, on: bool) -> None:
    body = f"enableMetadataReplication={'true' if on else 'false'}\n".encode()
    resp = await client.invoke(addr, RemotingCommand(code=RequestCode.UPDATE_BROKER_CONFIG, body=body), 5.0)
    if resp.code != ResponseCode.SUCCESS:
        raise RuntimeError(f"UPDATE_BROKER_CONFIG: {resp.code} {resp.remark}")


async def _two_way(client: RemotingClient, addr: str, seconds: float, base: int) -> tuple[float, list[float], int]:
    """Closed loop: (commits/s, latencies in ms, errors)."""
    lat: list[float] = []
    errors = 0
    stop = time.monotonic() + seconds
    counter = 0

    async def worker(w: int) -> None:
        nonlocal errors, counter
        while time.monotonic() < stop:
            counter += 1
            n = counter
            t = time.perf_counter()
            resp = await client.invoke(addr, _commit(n % GROUPS, (n // GROUPS) % QUEUES, base + n), 10.0)
            lat.append((time.perf_counter() - t) * 1000)
            if resp.code != ResponseCode.SUCCESS:
                errors += 1

    start = time.monotonic()
    await asyncio.gather(*(worker(w) for w in range(CONCURRENCY)))
    return len(lat) / (time.monotonic() - start), lat, errors


async def _one_way(client: RemotingClient, addr: str, count: int, base: int) -> float:
    """``count`` one-way commits, then a QUERY_CONSUMER_OFFSET behind them: commits/s."""
    start = time.monotonic()
    for n in range(count):
        await client.invoke_oneway(addr, _commit(n % GROUPS, (n // GROUPS) % QUEUES, base + n, oneway=True))
    last = count - 1
    query = RemotingCommand(code=RequestCode.QUERY_CONSUMER_OFFSET, ext_fields={
        "consumerGroup": f"CG_BENCH_{last % GROUPS}", "topic": TOPIC, "queueId": str((last // GROUPS) % QUEUES)})
    resp = await client.invoke(addr, query, 60.0)
    if resp.code != ResponseCode.SUCCESS or int(resp.ext_fields["offset"]) != base + last:
        raise RuntimeError(f"the last one-way commit is not on the master: {resp.code} {resp.ext_fields}")
    return count / (time.monotonic() - start)


async def _measure(addr: str, http_port: int, pids: tuple[int, int], rounds: int, seconds: float,
                   burst: int) -> dict[str, Any]:
    client = RemotingClient()
    results: dict[bool, dict[str, list[Any]]] = {on: {"tps": [], "lat": [], "err": [], "oneway": [], "cpu": []}
                                                  for on in (True, False)}
    try:
        create = RemotingCommand(code=RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields={
            "topic": TOPIC, "readQueueNums": str(QUEUES), "writeQueueNums": str(QUEUES), "perm": "6"})
        resp = await client.invoke(addr, create, 10.0)
        if resp.code != ResponseCode.SUCCESS:
            raise RuntimeError(f"cannot create {TOPIC}: {resp.remark}")
        base = 1
        await _two_way(client, addr, 1.0, base)  # warm up
        written0 = _ha(http_port)["metadataReplication"]
        changes = 0
        for r in range(rounds):
            for on in ((True, False) if r % 2 == 0 else (False, True)):
                await _switch(client, addr, on)
                base += 10_000_000
                before = _ha(http_port)["metadataReplication"]["changesRecorded"]
                cpu0 = [_proc_cpu(pid) for pid in pids]
                tps, lat, err = await _two_way(client, addr, seconds, base)
                cpu1 = [_proc_cpu(pid) for pid in pids]
                if on:
                    changes += _ha(http_port)["metadataReplication"]["changesRecorded"] - before
                base += 10_000_000
                oneway = await _one_way(client, addr, burst, base)
                res = results[on]
                res["cpu"].append([1e6 * (b - a) / max(1, len(lat)) for a, b in zip(cpu0, cpu1, strict=True)])
                res["tps"].append(tps)
                res["lat"].append(lat)
                res["err"].append(err)
                res["oneway"].append(oneway)
        await _switch(client, addr, True)
        written1 = _ha(http_port)["metadataReplication"]
    finally:
        await client.close()
    out: dict[str, Any] = {}
    for on, res in results.items():
        i = sorted(range(rounds), key=lambda k: res["tps"][k])[rounds // 2]
        lat = sorted(res["lat"][i])
        out["on" if on else "off"] = {"tps": res["tps"][i], "p50": percentile(lat, 50), "p99": percentile(lat, 99),
                                      "errors": sum(res["err"]), "oneway": statistics.median(res["oneway"]),
                                      "master_us": statistics.median(c[0] for c in res["cpu"]),
                                      "slave_us": statistics.median(c[1] for c in res["cpu"])}
    records = written1["recordsWritten"] - written0["recordsWritten"]
    out["changes_per_record"] = (written1["changesRecorded"] - written0["changesRecorded"]) / max(1, records)
    out["two_way_changes"] = changes
    return out


def run(short: bool = False) -> None:
    """Start the cluster, measure, print a table."""
    rounds, seconds, burst = (1, 2.0, 2_000) if short else (3, 5.0, ONEWAY_BURST)
    root = Path(tempfile.mkdtemp(prefix="bench-metadata-"))
    cluster = LocalCluster(root, find_free_base_port(), brokers=1, nameservers=1)
    try:
        state = cluster.start(detach=False, timeout=90.0)
        master, slave = _master(state)
        pids = (cluster.procs[master.name].pid, cluster.procs[slave.name].pid)
        res = asyncio.run(_measure(master.addr, master.http_port, pids, rounds, seconds, burst))
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    on, off = res["on"], res["off"]
    print(f"controller mode, 1 master + 1 slave, allAckInSyncStateSet, ASYNC_FLUSH; {rounds} alternating rounds "
          f"of {seconds:.0f} s, median round; {CONCURRENCY} two-way commits in flight, one-way bursts of {burst}")
    print(f"{'enableMetadataReplication':<28}{'two-way commits/s':>18}{'p50 ms':>9}{'p99 ms':>9}{'errors':>8}"
          f"{'master µs/commit':>18}{'slave µs/commit':>17}{'one-way commits/s':>19}")
    for name, r in (("false", off), ("true", on)):
        print(f"{name:<28}{r['tps']:>18,.0f}{r['p50']:>9.2f}{r['p99']:>9.2f}{r['errors']:>8}{r['master_us']:>18.1f}"
              f"{r['slave_us']:>17.1f}{r['oneway']:>19,.0f}")
    print(f"ratio true/false: two-way {on['tps'] / off['tps']:.2f}, one-way {on['oneway'] / off['oneway']:.2f}; "
          f"{res['changes_per_record']:.1f} changed offset entries per metadata record")
