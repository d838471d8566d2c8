"""The shared test helpers of tests/support.py: polling and unique names."""

from __future__ import annotations

import re

import pytest

from tests.support import eventually, unique, wait_for


def test_wait_for_returns_the_first_truthy_value_and_retries_only_the_named_errors() -> None:
    calls = iter([0, None, ConnectionRefusedError("starting"), [], "ready"])

    def probe() -> object:
        value = next(calls)
        if isinstance(value, Exception):
            raise value
        return value

    assert wait_for(probe, 5, interval=0.001, retry_on=(OSError,)) == "ready"
    with pytest.raises(ConnectionRefusedError):  # not named in retry_on: a real failure, at once
        wait_for(lambda: (_ for _ in ()).throw(ConnectionRefusedError("down")), 5)
    with pytest.raises(AssertionError, match=r"timed out after 0.05 s waiting for the moon \(last: 0\)"):
        wait_for(lambda: 0, 0.05, interval=0.01, what="the moon")


async def test_eventually_awaits_coroutine_predicates_and_names_what_it_waited_for() -> None:
    seen: list[int] = []

    async def grows() -> list[int]:
        seen.append(len(seen))
        return seen if len(seen) >= 3 else []

    assert await eventually(grows, 5, interval=0.001) == [0, 1, 2]
    assert await eventually(lambda: 7, 1) == 7
    with pytest.raises(AssertionError, match=r"waiting for a route \(last: TimeoutError\('slow'\)\)"):
        await eventually(lambda: (_ for _ in ()).throw(TimeoutError("slow")), 0.05, interval=0.01,
                         what="a route", retry_on=(TimeoutError,))


def test_unique_names_are_fresh_and_valid_topic_names() -> None:
    names = {unique("CliT") for _ in range(1000)}
    assert len(names) == 1000
    assert all(re.fullmatch(r"CliT-[0-9a-f]{10}", n) for n in names)
