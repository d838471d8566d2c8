"""A request driver that runs inside a network namespace for the replication partition test.

Run as ``ip netns exec NS python -m tests.integration.netns_driver``; reads one
JSON command per line on stdin and answers one JSON line on stdout:

* ``{"op": "http", "url": U, "method": "GET", "body": null}`` → ``{"status": n, "body": ...}``
  (JSON, or the text when it is not JSON; ``status`` 0 and ``error`` when the connection fails);
* ``{"op": "create_topic", "addr": A, "topic": T, "queues": n}`` → ``{"code": n}``;
* ``{"op": "send", "addr": A, "topic": T, "n": N, "timeout": s}`` → ``{"results": [[code, seconds], ...]}``:
  N sequential SEND_MESSAGE requests (code -1 = no answer within ``timeout``).
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import aiohttp
import orjson

from rocket.remoting import RemotingClient, RemotingError
from tests.integration.broker_harness import RawBroker


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
    try:
        while line := await reader.readline():
            cmd = orjson.loads(line)
            op = cmd["op"]
            out: dict[str, Any]
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
                        resp = await asyncio.wait_for(rb.send(cmd["topic"], f"m{i}".encode() * 10,
                                                              queue_id=i % 4), cmd.get("timeout", 10))
                        code = resp.code
                    except (RemotingError, TimeoutError):
                        code = -1
                    results.append([code, round(time.perf_counter() - t0, 4)])
                out = {"results": results}
            else:
                out = {"error": f"unknown op {op}"}
            sys.stdout.write(orjson.dumps(out).decode() + "\n")
            sys.stdout.flush()
    finally:
        await client.close()


if __name__ == "__main__":
    asyncio.run(main())
