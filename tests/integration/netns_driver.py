"""A request driver that runs inside a network namespace for the replication partition test.

Run as ``ip netns exec NS python -m tests.integration.netns_driver``; reads one
JSON command per line on stdin and answers one JSON line on stdout:

* ``{"op": "http", "url": U, "method": "GET", "body": null}`` → ``{"status": n, "body": ...}``
  (JSON, or the text when it is not JSON; ``status`` 0 and ``error`` when the connection fails);
* ``{"op": "create_topic", "addr": A, "topic": T, "queues": n}`` → ``{"code": n}``;
* ``{"op": "send", "addr": A, "topic": T, "n": N, "timeout": s}`` → ``{"results": [[code, seconds], ...]}``:
  N sequential SEND_MESSAGE requests (code -1 = no answer within ``timeout``); ``body`` (text,
  optional): the bodies are ``f"{body}{i}"``;
* ``{"op": "load_start", "namesrv": A, "topic": T, "workers": n}`` → ``{"ok": true}``: a producer
  (our client, routes from the NameServer) sending unique bodies in the background, recording
  every acknowledged one (the checker's load, ``failover_support.AckLog``);
* ``{"op": "load_stop"}`` → ``{"acked": [[body, monotonic seconds, broker port], ...], "not_ok":
  {status: n}}``; CLOCK_MONOTONIC is the same in every namespace;
* ``{"op": "bodies", "addr": A, "topic": T, "queues": n}`` → ``{"bodies": {body: count}}``: every
  message of the topic on that broker (raw pulls).
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import aiohttp
import orjson

from rocket.client import Producer
from rocket.remoting import RemotingClient, RemotingError
from tests.integration.broker_harness import RawBroker
from tests.integration.failover_support import AckLog, all_bodies


async def _http(cmd: dict[str, Any]) -> dict[str, Any]:
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=cmd.get("timeout", 5))) as http, \
                http.request(cmd.get("method", "GET"), cmd["url"], json=cmd.get("body")) as resp:
            text = await resp.text()
            try:
                return {"status": resp.status, "body": orjson.loads(text)}
            except orjson.JSONDecodeError:
                return {"status": resp.status, "body": text}
    except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
        return {"status": 0, "error": f"{type(exc).__name__}: {exc}"}


async def main() -> None:
    client = RemotingClient()
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    load: tuple[Producer, AckLog] | None = None
    try:
        while line := await reader.readline():
            out: dict[str, Any]
            try:
                cmd = orjson.loads(line)
                op = cmd["op"]
                if op == "http":
                    out = await _http(cmd)
                elif op == "create_topic":
                    resp = await RawBroker(client, cmd["addr"]).create_topic(cmd["topic"], queues=cmd.get("queues", 4))
                    out = {"code": resp.code}
                elif op == "send":
                    rb = RawBroker(client, cmd["addr"])
                    results = []
                    for i in range(cmd["n"]):
                        t0 = time.perf_counter()
                        try:
                            body = f"{cmd['body']}{i}".encode() if cmd.get("body") else f"m{i}".encode() * 10
                            resp = await asyncio.wait_for(rb.send(cmd["topic"], body, queue_id=i % 4),
                                                          cmd.get("timeout", 10))
                            code = resp.code
                        except (RemotingError, TimeoutError):
                            code = -1
                        results.append([code, round(time.perf_counter() - t0, 4)])
                    out = {"results": results}
                elif op == "load_start":
                    producer = Producer(f"PG_{cmd['topic']}", cmd["namesrv"], poll_namesrv_interval=0.5,
                                        fault_avoid_seconds=1.0, send_timeout=3.0)
                    await producer.start()
                    load = (producer, AckLog(producer, cmd["topic"], workers=cmd.get("workers", 8)))
                    load[1].start()
                    out = {"ok": True}
                elif op == "load_stop":
                    if load is None:
                        out = {"error": "no load running"}
                    else:
                        producer, acks = load
                        await acks.stop()
                        await producer.shutdown()
                        load = None
                        out = {"acked": [[b.decode(), t, port] for b, (t, port) in acks.acked.items()],
                               "not_ok": acks.not_ok}
                elif op == "bodies":
                    got = await all_bodies(client, cmd["addr"], cmd["topic"], cmd.get("queues", 4))
                    out = {"bodies": {b.decode(errors="replace"): n for b, n in got.items()}}
                else:
                    out = {"error": f"unknown op {op}"}
            except Exception as exc:  # the test reads the error; the driver keeps serving
                out = {"error": f"{type(exc).__name__}: {exc}"}
            sys.stdout.write(orjson.dumps(out).decode() + "\n")
            sys.stdout.flush()
    finally:
        await client.close()


if __name__ == "__main__":
    asyncio.run(main())
