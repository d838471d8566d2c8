"""Helpers for tests that run real processes on loopback."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = ROOT.parent / "shared" / "data"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_port(port: int, host: str = "127.0.0.1", timeout: float = 15.0,
              proc: subprocess.Popen[bytes] | None = None) -> None:
    """Wait until ``host:port`` accepts connections; fail if ``proc`` exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}:\n{out}")
        with socket.socket() as sock:
            sock.settimeout(0.2)
            if sock.connect_ex((host, port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listening on {host}:{port} after {timeout} s")


def rocket_command(*args: str) -> list[str]:
    """The argv that runs ``rocket <args>`` with this interpreter."""
    return [sys.executable, "-m", "rocket.cli", *args]


def terminate(proc: subprocess.Popen[Any], *, grace: float = 15.0) -> None:
    """Stop ``proc`` if it still runs: SIGTERM, then SIGKILL after ``grace`` seconds; reaps it."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def running(argv: Sequence[str], *, port: int | None = None, env: dict[str, str] | None = None,
            timeout: float = 15.0, log_path: Path | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``argv`` as a subprocess for the duration of the block.

    Waits for ``port`` when given. On exit sends SIGTERM, then SIGKILL after 10 s.
    """
    full_env = {**os.environ, **(env or {})}
    out = open(log_path, "wb") if log_path else subprocess.PIPE
    proc = subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT, env=full_env)
    try:
        if port is not None:
            wait_port(port, timeout=timeout, proc=proc if log_path is None else None)
        yield proc
    finally:
        terminate(proc, grace=10.0)
        if log_path is not None and hasattr(out, "close"):
            out.close()  # type: ignore[union-attr]
