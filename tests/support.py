"""Helpers for tests that run real processes on loopback, and a server connection that was never connected."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from rocket.local import ephemeral_port_range
from rocket.remoting.connection import Processors, RemotingConnection

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = ROOT.parent / "shared" / "data"


#: Every port :func:`free_port` or :func:`reserve_ports` handed out in this process. None is handed
#: out twice: a port chosen before its server starts (or for a server that stops and restarts on
#: it) is not free in the kernel's eyes meanwhile, so the kernel may offer it again.
_handed_out: set[int] = set()

#: Where :func:`reserve_ports` looks (minus the kernel's ephemeral range, see below).
_RESERVED_LOW, _RESERVED_HIGH = 10000, 65000


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now and not handed out before by this process.

    Use it for a server started at once; a port that must stay free for longer (a server that
    is restarted on the same port) comes from :func:`reserve_ports`.
    """
    for _ in range(1000):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in _handed_out:
            _handed_out.add(port)
            return port
    raise RuntimeError("the kernel keeps offering ports this process already handed out")


def unconnected_connection(peer: str = "127.0.0.1:5555") -> RemotingConnection:
    """A server-side :class:`RemotingConnection` that was never connected, claiming ``peer`` as its
    remote address: what a processor called directly gets as its connection. A real one, since the
    processors may be compiled with mypyc, which checks the argument's type."""
    conn = RemotingConnection(Processors())
    conn.peer = peer
    return conn


def unique(prefix: str) -> str:
    """A fresh topic or group name, ``<prefix>-<10 hex digits>`` (valid for RocketMQ's
    ``TopicValidator``: letters, digits, ``-``, ``_``), so tests sharing a cluster see none of each
    other's messages."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


#: How long :func:`wait_for` and :func:`eventually` poll by default, in seconds. Generous: it only
#: bounds how long a failing test waits, a passing one returns as soon as the condition holds.
WAIT_TIMEOUT = 30.0


class _Poll:
    """The bookkeeping shared by :func:`wait_for` and :func:`eventually`: deadline, last value or
    error, and the failure message."""

    def __init__(self, timeout: float, what: str) -> None:
        self.timeout, self.what = timeout, what
        self.deadline = time.monotonic() + timeout
        self.last: Any = None

    def expired(self) -> bool:
        return time.monotonic() >= self.deadline

    def failure(self) -> AssertionError:
        return AssertionError(f"timed out after {self.timeout} s waiting for {self.what} (last: {self.last!r})")


def wait_for(predicate: Callable[[], Any], timeout: float = WAIT_TIMEOUT, *, interval: float = 0.1,
             what: str = "condition", retry_on: tuple[type[BaseException], ...] = ()) -> Any:
    """Call ``predicate()`` every ``interval`` seconds until it returns something truthy, and
    return that. An exception of a type in ``retry_on`` counts as "not yet" (any other propagates).
    Raises ``AssertionError`` naming ``what`` and the last value or error after ``timeout`` s.
    For code running on an event loop use :func:`eventually`."""
    poll = _Poll(timeout, what)
    while True:
        try:
            poll.last = predicate()
        except retry_on as exc:
            poll.last = exc
        else:
            if poll.last:
                return poll.last
        if poll.expired():
            raise poll.failure()
        time.sleep(interval)


async def eventually(predicate: Callable[[], Any], timeout: float = WAIT_TIMEOUT, *, interval: float = 0.1,
                     what: str = "condition", retry_on: tuple[type[BaseException], ...] = ()) -> Any:
    """:func:`wait_for` for asyncio tests: ``predicate`` may be a plain function or return an
    awaitable (a coroutine function), and the loop keeps running between polls."""
    poll = _Poll(timeout, what)
    while True:
        try:
            value = predicate()
            poll.last = await value if inspect.isawaitable(value) else value
        except retry_on as exc:
            poll.last = exc
        else:
            if poll.last:
                return poll.last
        if poll.expired():
            raise poll.failure()
        await asyncio.sleep(interval)


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("0.0.0.0", port))  # our servers listen on every address
        except OSError:
            return False
    return True


def reserve_ports(offsets: Sequence[int] = (0,)) -> int:
    """A base port ``p`` such that every ``p + offset`` is free now and stays free of the kernel.

    The ports lie outside the kernel's ephemeral range, so no outgoing connection (nor its
    TIME_WAIT, 60 s after it closed) and no ``bind(0)`` can take one of them later, and this
    process hands none of them out again: a server may stop and be restarted on them minutes
    later. (A port from :func:`free_port` is in the ephemeral range: on a busy machine any
    connection may take it once it is unbound.)
    """
    low, high = ephemeral_port_range()
    lo_off, hi_off = min(offsets), max(offsets)
    # bases whose whole block lies below, or above, the ephemeral range
    below = range(_RESERVED_LOW - lo_off, min(low, _RESERVED_HIGH) - hi_off)
    above = range(max(high + 1, _RESERVED_LOW) - lo_off, _RESERVED_HIGH - hi_off)
    for _ in range(500):
        if below or above:
            pick = random.randrange(len(below) + len(above))
            base = below[pick] if pick < len(below) else above[pick - len(below)]
        else:  # the ephemeral range covers everything: the best left is a port free now
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                base = int(sock.getsockname()[1]) - lo_off
        ports = [base + o for o in offsets]
        if not any(p in _handed_out for p in ports) and all(_bindable(p) for p in ports):
            _handed_out.update(ports)
            return base
    raise RuntimeError(f"no free ports at offsets {list(offsets)} (ephemeral range {low}-{high})")


def _log_tail(log_path: Path | None, limit: int = 4000) -> str:
    if log_path is None:
        return ""
    try:
        return log_path.read_text(errors="replace")[-limit:]
    except OSError:
        return ""


def wait_port(port: int, host: str = "127.0.0.1", timeout: float = 15.0,
              proc: subprocess.Popen[bytes] | None = None, log_path: Path | None = None,
              poll: float = 0.05) -> None:
    """Wait until ``host:port`` accepts connections, trying every ``poll`` seconds; fail at once
    if ``proc`` exits first (with its output: its stdout pipe, else the end of ``log_path``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            out = proc.stdout.read().decode(errors="replace") if proc.stdout else _log_tail(log_path)
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}:\n{out}")
        with socket.socket() as sock:
            sock.settimeout(0.2)
            if sock.connect_ex((host, port)) == 0:
                return
        time.sleep(poll)
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
            wait_port(port, timeout=timeout, proc=proc, log_path=log_path)
        yield proc
    finally:
        terminate(proc, grace=10.0)
        if log_path is not None and hasattr(out, "close"):
            out.close()  # type: ignore[union-attr]
