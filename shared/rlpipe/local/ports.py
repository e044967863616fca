"""Loopback ports handed to the local stack's servers, unique across every process on the machine.

A port found by binding to port 0 and closing the socket is only free for a moment: it comes from
the kernel's ephemeral range (``net.ipv4.ip_local_port_range``), where every outgoing connection
also takes its source port, and another test process picking at the same time can be handed it
too. Two test workers did collide this way ("Failed to bind to address 127.0.0.1:58667"). So
ports come from below the ephemeral range, in turn, from one counter that every process on the
machine shares through a locked file: a port is given out again only after the whole range has
gone round, and is skipped while anything is still bound to it.
"""

from __future__ import annotations

import fcntl
import os
import socket
import tempfile
from pathlib import Path

# Below Linux's default ephemeral range (32768-60999) and above the registered ports in common use.
FIRST_PORT = 20000
LAST_PORT = 32000
COUNTER_FILE = Path(tempfile.gettempdir()) / "rlpipe-ports.counter"


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _next(counter: Path, first: int, last: int) -> int:
    """The counter's next value in ``[first, last]``, under an exclusive lock on its file."""
    counter.parent.mkdir(parents=True, exist_ok=True)
    with open(counter, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.seek(0)
        text = fh.read().strip()
        current = int(text) if text.isdigit() else first + os.getpid() % (last - first)
        port = current if first <= current <= last else first
        fh.seek(0)
        fh.truncate()
        fh.write(str(port + 1 if port < last else first))
        fh.flush()
        return port


def free_port(counter: Path | None = None) -> int:
    """A loopback TCP port no other caller on this machine has been given recently, and free now."""
    low, _high = _ephemeral_range()
    last = min(LAST_PORT, low - 1)
    span = last - FIRST_PORT + 1
    path = counter or COUNTER_FILE
    for _ in range(span):
        port = _next(path, FIRST_PORT, last)
        if _bindable(port):
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as fallback:  # the range is exhausted
        fallback.bind(("127.0.0.1", 0))
        return int(fallback.getsockname()[1])
