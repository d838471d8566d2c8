"""Crash-test writer: appends to a SYNC_FLUSH store until killed, printing every acknowledged message.

``python -m tests.integration.store_crash_writer <store dir> <seed>`` prints one
line per PUT_OK: ``topic queueId queueOffset physicalOffset bodyHash``, flushed
at once, so that the parent knows exactly what was acknowledged when it sends
SIGKILL. Also prints ``ready`` once the store has started.
"""

from __future__ import annotations

import asyncio
import random
import sys
from pathlib import Path

from rocket.store import FlushDiskType, PutMessageStatus
from tests.store_helpers import body_hash, make_request, opened, small_config

TOPICS = ("CrashA", "CrashB", "%RETRY%crash")


def crash_config(root: Path):  # type: ignore[no-untyped-def]
    """The store settings shared by the writer and the verifying parent."""
    return small_config(root, mapped_file_size_commit_log=64 * 1024, mapped_file_size_consume_queue=20 * 50,
                        max_hash_slot_num=32, max_index_num=200, flush_disk_type=FlushDiskType.SYNC_FLUSH,
                        sync_flush_timeout=30.0)


async def main(root: Path, seed: int) -> None:
    rng = random.Random(seed)
    out = sys.stdout

    async with opened(crash_config(root)) as store:
        out.write("ready\n")
        out.flush()

        async def writer(w: int) -> None:
            n = 0
            while True:
                n += 1
                topic = rng.choice(TOPICS)
                qid = rng.randrange(4)
                batch = rng.random() < 0.2
                count = rng.randint(2, 6) if batch else 1
                reqs = []
                for k in range(count):
                    body = rng.randbytes(rng.choice([0, 10, 200, 1500, 6000]))
                    reqs.append(make_request(topic, qid, body, tags=f"t{k % 2}", keys=[f"w{w}n{n}k{k}"],
                                             uniq=f"{seed:08X}{w:04X}{n:08X}{k:04X}"))
                res = await (store.put_messages(reqs) if batch else store.put_message(reqs[0]))
                if res.status is not PutMessageStatus.PUT_OK:
                    continue
                for r, m in zip(reqs, res.messages, strict=True):
                    out.write(f"{topic} {qid} {m.queue_offset} {m.physical_offset} {body_hash(r.body)}\n")
                out.flush()

        await asyncio.gather(*(writer(w) for w in range(8)))


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2])))
