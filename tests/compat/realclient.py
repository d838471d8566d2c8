"""The real RocketMQ client (PyPI ``rocketmq==0.4.4``): its virtualenv and its driver.

The package installs a top-level module named ``rocketmq`` (a ctypes wrapper
around the C++ core ``librocketmq.so`` bundled in its manylinux wheel), so it
lives in a virtualenv of its own, ``.venv-compat/`` at the repository root
(override with ``ROCKET_COMPAT_VENV``). :func:`ensure_venv` creates it on first
use with ``python -m venv`` + ``pip install rocketmq==0.4.4`` and checks that
``import rocketmq.client`` works; it raises :class:`CompatVenvError` saying
why when it cannot (the tests then fail, they never skip).

Run ``python -m tests.compat.realclient`` to create it ahead of the tests.

The wheel needs nothing from the system beyond glibc, libstdc++ and libgcc_s
(it bundles its own zlib); it is x86_64 (manylinux1) only.

:func:`run_driver` runs ``tests/compat/driver.py`` under that venv's python
with a hard timeout and ``HOME`` pointed at a scratch folder (the C++ core
writes its logs to ``$HOME/logs/rocketmq-cpp``), and returns the JSON lines
it printed. :class:`DriverProcess` does the same in the background.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.support import ROOT

PACKAGE = "rocketmq==0.4.4"
DRIVER = Path(__file__).resolve().parent / "driver.py"
VENV = Path(os.environ.get("ROCKET_COMPAT_VENV", ROOT / ".venv-compat"))
_STAMP_NAME = ".compat-ready"


class CompatVenvError(RuntimeError):
    """The real client's virtualenv could not be created or does not import."""


class DriverError(AssertionError):
    """The driver exited badly or timed out; the message has its output and log tail."""


def venv_python(venv: Path = VENV) -> Path:
    return venv / "bin" / "python"


def _check_import(python: Path) -> str | None:
    """None when ``import rocketmq.client`` works in ``python``, else the error text."""
    try:
        proc = subprocess.run(
            [str(python), "-c", "import rocketmq.client, rocketmq.ffi; print(rocketmq.ffi._DYLIB_PATH)"],
            capture_output=True, text=True, timeout=60, env=_clean_env(),
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{type(exc).__name__}: {exc}"
    if proc.returncode != 0:
        return (proc.stderr or proc.stdout).strip()[-2000:]
    return None


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(extra)
    return env


def ensure_venv(venv: Path = VENV, base_python: str | None = None) -> Path:
    """Create (once) the real client's virtualenv; return its python.

    Idempotent and safe to call from several processes (a file lock guards it).
    Raises :class:`CompatVenvError` when the venv cannot be made or the
    package does not import, with pip's or Python's own message.
    """
    python = venv_python(venv)
    stamp = venv / _STAMP_NAME
    if stamp.exists() and python.exists() and stamp.read_text().strip() == PACKAGE:
        return python
    venv.mkdir(parents=True, exist_ok=True)  # `python -m venv` accepts an existing folder
    with open(venv / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists() and python.exists() and stamp.read_text().strip() == PACKAGE:
            return python
        base = base_python or _base_python()
        if not python.exists():
            proc = subprocess.run([base, "-m", "venv", str(venv)], capture_output=True, text=True, timeout=300)
            if proc.returncode != 0:
                raise CompatVenvError(
                    f"`{base} -m venv {venv}` failed ({proc.returncode}): {(proc.stderr or proc.stdout).strip()}"
                )
        proc = subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", PACKAGE],
            capture_output=True, text=True, timeout=600, env=_clean_env(),
        )
        if proc.returncode != 0:
            raise CompatVenvError(
                f"`pip install {PACKAGE}` into {venv} failed ({proc.returncode}); the compatibility suite "
                f"needs the real RocketMQ client (a manylinux x86_64 wheel):\n{(proc.stderr or proc.stdout).strip()}"
            )
        problem = _check_import(python)
        if problem is not None:
            raise CompatVenvError(
                f"{PACKAGE} installed into {venv} but `import rocketmq.client` fails "
                f"(librocketmq.so needs glibc, libstdc++ and libgcc_s):\n{problem}"
            )
        stamp.write_text(PACKAGE + "\n")
    return python


def _base_python() -> str:
    """An interpreter that is not inside a venv (``sys._base_executable`` when known)."""
    base = getattr(sys, "_base_executable", None) or sys.executable
    return str(base)


# -- running the driver -----------------------------------------------------------------


def parse_lines(text: str) -> list[dict[str, Any]]:
    """The JSON objects among ``text``'s lines (other lines are ignored)."""
    events = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                events.append(json.loads(line))
    return events


def cpp_log_tail(home: Path, limit: int = 4000) -> str:
    """The end of the C++ core's newest log file under ``home``, for failure messages."""
    logs = sorted((home / "logs").rglob("*"), key=lambda p: p.stat().st_mtime if p.is_file() else 0)
    files = [p for p in logs if p.is_file()]
    if not files:
        return "(no C++ client log)"
    text = files[-1].read_text(errors="replace")
    return f"--- {files[-1]} (last {limit} chars) ---\n{text[-limit:]}"


def cpp_error_lines(home: Path, limit: int = 8000) -> str:
    """The ERROR and WARN lines of every C++ core log file under ``home`` (the core logs why each
    attempt of a send failed: "send failed of times:N,brokerName:B", "GetTransport of:<addr> get
    timed_mutex timeout", "can not connect to:<addr>"), the last ``limit`` characters of them."""
    files = sorted(p for p in (home / "logs").rglob("*") if p.is_file())
    if not files:
        return "(no C++ client log)"
    lines = [f"{p.name}: {line}" for p in files for line in p.read_text(errors="replace").splitlines()
             if "ERROR" in line or "WARN" in line]
    return "--- C++ client ERROR/WARN lines ---\n" + "\n".join(lines)[-limit:]


class Driver:
    """Runs the driver with one compat python, a namesrv list and a scratch HOME."""

    def __init__(self, python: Path, namesrv: str, home: Path, log_level: str = "warn") -> None:
        self.python = python
        self.namesrv = namesrv
        self.home = home
        self.log_level = log_level
        #: More environment for the driver (e.g. ROCKET_ACCESS_KEY/ROCKET_SECRET_KEY to sign).
        self.extra_env: dict[str, str] = {}
        home.mkdir(parents=True, exist_ok=True)

    def argv(self, *args: str) -> list[str]:
        return [str(self.python), str(DRIVER), "--namesrv", self.namesrv, "--log-level", self.log_level, *args]

    def env(self) -> dict[str, str]:
        return _clean_env(HOME=str(self.home), PYTHONUNBUFFERED="1", **self.extra_env)

    def run(self, *args: str, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Run one driver command to completion; return its events.

        Raises :class:`DriverError` on a timeout or a non-zero exit.
        """
        argv = self.argv(*args)
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=self.env())
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            raise DriverError(
                f"driver {' '.join(args)} timed out after {timeout} s\nstdout:\n{out[-4000:]}\n"
                f"{cpp_log_tail(self.home)}"
            ) from None
        if proc.returncode != 0:
            raise DriverError(
                f"driver {' '.join(args)} exited {proc.returncode}\nstdout:\n{proc.stdout[-4000:]}\n"
                f"stderr:\n{proc.stderr[-4000:]}\n{cpp_log_tail(self.home)}"
            )
        return parse_lines(proc.stdout)

    def start(self, *args: str, timeout: float = 60.0) -> DriverProcess:
        """Start a driver command in the background (e.g. a push consumer)."""
        return DriverProcess(self, list(args), timeout)

    def send(self, topic: str, count: int, *extra: str, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Sync-send ``count`` messages; return the ``send`` and ``send_error`` events."""
        events = self.run("send", "--topic", topic, "--count", str(count), *extra, timeout=timeout)
        sends = [e for e in events if e["event"] in ("send", "send_error")]
        if any(e["event"] == "send_error" for e in sends):
            sends.append({"event": "cpp_log", "tail": cpp_log_tail(self.home, 6000)})
        return sends


class DriverProcess:
    """A driver command running in the background; its stdout is read on :meth:`wait`."""

    def __init__(self, driver: Driver, args: list[str], timeout: float) -> None:
        self.driver = driver
        self.args = args
        self.timeout = timeout
        self.started_at = time.monotonic()
        self._out_path = driver.home / f"driver-{os.getpid()}-{time.monotonic_ns()}.out"
        self._out = open(self._out_path, "w")
        self.proc = subprocess.Popen(driver.argv(*args), stdout=self._out, stderr=subprocess.STDOUT,
                                     env=driver.env(), start_new_session=True)

    def events(self) -> list[dict[str, Any]]:
        """Events printed so far."""
        return parse_lines(self._out_path.read_text(errors="replace"))

    def wait_for(self, event: str, timeout: float = 15.0) -> dict[str, Any]:
        """Wait until an event named ``event`` has been printed; return the first one."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for e in self.events():
                if e["event"] == event:
                    return e
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise DriverError(f"driver {' '.join(self.args)} printed no {event!r} within {timeout} s\n{self.output()}")

    def output(self) -> str:
        text = self._out_path.read_text(errors="replace") if self._out_path.exists() else ""
        return f"output:\n{text[-6000:]}\n{cpp_log_tail(self.driver.home)}"

    def wait(self) -> list[dict[str, Any]]:
        """Wait for exit (hard timeout from start); return all events. Raises :class:`DriverError`."""
        remaining = max(0.1, self.timeout - (time.monotonic() - self.started_at))
        try:
            code = self.proc.wait(remaining)
        except subprocess.TimeoutExpired:
            self.kill()
            raise DriverError(
                f"driver {' '.join(self.args)} timed out after {self.timeout} s\n{self.output()}"
            ) from None
        finally:
            self._out.close()
        if code != 0:
            raise DriverError(f"driver {' '.join(self.args)} exited {code}\n{self.output()}")
        return self.events()

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self._out.close()


@contextlib.contextmanager
def background(driver: Driver, *args: str, timeout: float = 60.0) -> Iterator[DriverProcess]:
    """Start a background driver command; kill it if the block exits early."""
    proc = driver.start(*args, timeout=timeout)
    try:
        yield proc
    finally:
        proc.kill()


def main() -> int:
    try:
        python = ensure_venv()
    except CompatVenvError as exc:
        print(f"compat venv: {exc}", file=sys.stderr)
        return 1
    print(f"compat venv ready: {python} ({PACKAGE})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
