"""rocket.runtime.run: the loop runner's own fallback must not hide the coroutine's errors."""

from __future__ import annotations

import pytest

from rocket.runtime import run


async def _fails_importing() -> None:
    import rocket_no_such_module  # type: ignore[import-not-found]  # noqa: F401


def test_an_import_error_inside_main_is_raised_as_itself() -> None:
    # before: the ImportError was taken for a missing uvloop and main was awaited a second time
    # ("cannot reuse already awaited coroutine"), hiding the real error
    with pytest.raises(ModuleNotFoundError, match="rocket_no_such_module"):
        run(_fails_importing())


def test_run_returns_mains_result() -> None:
    async def answer() -> int:
        return 42

    assert run(answer()) == 42
