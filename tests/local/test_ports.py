"""Ports for local servers: never the same one to two processes, never from the ephemeral range.

Two test workers once started servers on the same port: both had bound port 0, closed the socket
and passed the number on, and the kernel handed it out again.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from rlpipe.local import ports

TAKE = """
import sys
from pathlib import Path
from rlpipe.local.ports import free_port
print(" ".join(str(free_port(Path(sys.argv[1]))) for _ in range(int(sys.argv[2]))))
"""


def test_concurrent_processes_never_get_the_same_port(tmp_path: Path) -> None:
    counter = tmp_path / "counter"
    procs = [
        subprocess.Popen([sys.executable, "-c", TAKE, str(counter), "300"], stdout=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    taken = [proc.communicate(timeout=120)[0].split() for proc in procs]
    assert all(proc.returncode == 0 for proc in procs)
    everything = [int(p) for batch in taken for p in batch]
    assert len(everything) == 900 and len(set(everything)) == 900


def test_ports_come_from_below_the_ephemeral_range(tmp_path: Path) -> None:
    low, _ = ports._ephemeral_range()
    taken = [ports.free_port(tmp_path / "counter") for _ in range(50)]
    assert all(ports.FIRST_PORT <= p < low for p in taken)


def test_a_port_something_is_bound_to_is_skipped(tmp_path: Path) -> None:
    counter = tmp_path / "counter"
    first = ports.free_port(counter)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", first + 1))
        counter.write_text(str(first + 1))
        assert ports.free_port(counter) == first + 2


def test_the_counter_wraps_round_the_range(tmp_path: Path) -> None:
    counter = tmp_path / "counter"
    low, _ = ports._ephemeral_range()
    last = min(ports.LAST_PORT, low - 1)
    counter.write_text(str(last))
    # Other workers' servers hold ports near the bottom of the range while this runs: a bound port
    # is skipped, so the exact numbers vary; that the counter wraps to the bottom does not.
    first, second = ports.free_port(counter), ports.free_port(counter)
    assert ports.FIRST_PORT <= min(first, second) < max(first, second) <= last or first == last
    assert second < last and int(counter.read_text()) < last  # wrapped round, not past the top
