"""``rocket.runtime.await_ended``: stopping a loop that is itself waiting for a child task must not
lose the stop (found by ``tests/chaos``: a slave's HA client kept running after ``stop()``, whose
caller — a controller role change holding the switch lock — then waited forever)."""

from __future__ import annotations

import asyncio

from rocket.runtime import LoopService, await_ended


class _Loop(LoopService):
    """A loop whose every round waits, in a ``finally``, for a slow child it cancelled."""

    def __init__(self) -> None:
        self.rounds = 0
        self.in_finally = asyncio.Event()

    async def _run(self) -> None:
        while True:
            self.rounds += 1
            child = asyncio.get_running_loop().create_task(self._slow_child())
            try:
                await asyncio.sleep(0)
                raise ConnectionError("the master closed the connection")
            except ConnectionError:
                pass
            finally:
                child.cancel()
                self.in_finally.set()
                await await_ended(child)
            await asyncio.sleep(0.01)

    async def _slow_child(self) -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            await asyncio.sleep(0.2)  # like a store write finishing in an executor
            raise


async def test_a_loop_stopped_while_it_waits_for_a_child_ends() -> None:
    loop = _Loop()
    loop.start()
    await loop.in_finally.wait()  # the loop is inside ``await await_ended(child)`` now
    await asyncio.wait_for(loop.stop(), 2.0)  # with a bare suppress(CancelledError) this never returns
    assert not loop.running
    assert loop.rounds == 1


async def test_await_ended_swallows_the_tasks_own_cancellation_and_error() -> None:
    async def fail() -> None:
        raise ValueError("boom")

    t = asyncio.get_running_loop().create_task(asyncio.sleep(10))
    t.cancel()
    await await_ended(t)
    f = asyncio.get_running_loop().create_task(fail())
    await await_ended(f)
    assert t.cancelled() and isinstance(f.exception(), ValueError)
