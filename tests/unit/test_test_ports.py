"""The test harness's port helpers (``tests.support``): a port is never handed out twice, and
ports reserved for a server that restarts lie outside the kernel's ephemeral range."""

from __future__ import annotations

import socket

from tests.support import ephemeral_port_range, free_port, reserve_ports


def test_free_port_never_hands_out_a_port_twice() -> None:
    ports = [free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)


def test_reserved_ports_are_outside_the_ephemeral_range_free_and_never_handed_out_again() -> None:
    low, high = ephemeral_port_range()
    offsets = (-2, 0, 1)
    bases = [reserve_ports(offsets) for _ in range(50)]
    reserved = [b + o for b in bases for o in offsets]
    assert len(set(reserved)) == len(reserved)
    if high - low < 50000:  # the ephemeral range leaves room (it does by default: 32768-60999)
        assert not [p for p in reserved if low <= p <= high]
    for port in reserved[:30]:
        with socket.socket() as sock:
            sock.bind(("0.0.0.0", port))
    assert not set(reserved) & {free_port() for _ in range(300)}
