"""Putting data into a running cluster for the analytics tests and benchmark.

:func:`publish` sends bodies to a topic (created first) with the project's
Producer, in batches (``send_batch``) so that a benchmark can load megabytes
quickly; :func:`publish_loghub` publishes LogHub lines as ``make run`` does
(topic ``loghub-<System>``, tags = system, keys = ``<System>-<line>``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any


async def _publish(namesrv: str, topic: str, bodies: Sequence[bytes], *, queue_nums: int, tags: str | None,
                   keys_prefix: str | None, batch: int, concurrency: int) -> int:
    from rocket.client import Admin, Producer, build_message

    async with Admin(namesrv) as admin:
        await admin.create_topic(topic, queue_nums=queue_nums)
    sent = 0
    async with Producer(f"analytics-{abs(hash(topic)) % 100000}", namesrv) as producer:
        for _ in range(50):  # the route appears once the brokers re-register the new topic
            try:
                await producer.client.fetch_route(topic)
                break
            except Exception:
                await asyncio.sleep(0.2)
        sem = asyncio.Semaphore(concurrency)

        async def one(start: int) -> None:
            nonlocal sent
            chunk = bodies[start:start + batch]
            msgs = [build_message(topic, b, tags=tags,
                                  keys=f"{keys_prefix}-{start + i + 1}" if keys_prefix else None)
                    for i, b in enumerate(chunk)]
            async with sem:
                if len(msgs) == 1:
                    await producer.send(msgs[0])
                else:
                    await producer.send_batch(msgs)
            sent += len(msgs)

        await asyncio.gather(*(one(i) for i in range(0, len(bodies), batch)))
    return sent


def publish(namesrv: str, topic: str, bodies: Sequence[bytes], *, queue_nums: int = 4, tags: str | None = None,
            keys_prefix: str | None = None, batch: int = 32, concurrency: int = 8) -> int:
    """Create ``topic`` (``queue_nums`` queues per broker group) and send ``bodies``; returns the count sent.

    Blocking (runs its own event loop). Raises the client's errors when a send fails.
    """
    return asyncio.run(_publish(namesrv, topic, bodies, queue_nums=queue_nums, tags=tags,
                                keys_prefix=keys_prefix, batch=batch, concurrency=concurrency))


def publish_loghub(namesrv: str, logs: dict[str, list[str]], **kwargs: Any) -> dict[str, int]:
    """Publish each system's lines to ``loghub-<System>`` (tags = system, keys ``<System>-<n>``)."""
    return {system: publish(namesrv, f"loghub-{system}", [ln.encode() for ln in lines], tags=system,
                            keys_prefix=system, **kwargs)
            for system, lines in logs.items()}
