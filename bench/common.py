"""What every benchmark shares: statistics, formatting, the machine description, the local stack
as a benchmark drives it, and a sampler of the stack's memory read from /proc.

Benchmarks report; they never assert timings. A figure is only printed next to a baseline that was
measured in the same run (or computed, and then the section says how), because absolute numbers
from a shared 2-core machine mean little on their own.
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "bench" / ".cache"  # git-ignored: stack roots, logs, raw results
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"
PYTHON = str(VENV_PYTHON if VENV_PYTHON.exists() else Path(sys.executable))
IMAGE_REPO = "us-docker.pkg.dev/cloud-tpu-images/maxtext-images/tpu_post_training"
# The e2e tests' backoff: a retried attempt starts after ~1 s instead of the preset's 30 s.
FAST_RETRY = {"backoff": {"initial_delay": 1.0, "max_delay": 2.0, "multiplier": 1.5}}


# ---- results ---------------------------------------------------------------------------------------


@dataclass
class Section:
    """One benchmark's output: markdown for RESULTS.md, headline rows, raw data for the JSON file."""

    key: str
    title: str
    body: str
    headline: list[tuple[str, str, str]] = field(default_factory=list)  # (figure, value, vs baseline)
    data: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    ok: bool = True  # False when a correctness check of the benchmark failed (not a timing)


def say(text: str) -> None:
    """Progress on stderr, so `make bench` shows where it is without cluttering the results."""
    print(f"[bench] {text}", file=sys.stderr, flush=True)


# ---- statistics ------------------------------------------------------------------------------------


def quantile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default), q in [0, 1]."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summary(values: Sequence[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50": quantile(values, 0.5),
        "p95": quantile(values, 0.95),
        "min": min(values) if values else math.nan,
        "max": max(values) if values else math.nan,
        "mean": sum(values) / len(values) if values else math.nan,
    }


def secs(value: float) -> str:
    """Seconds for a person: µs, ms or s with three significant digits."""
    if value is None or math.isnan(value):
        return "n/a"
    magnitude = abs(value)
    if magnitude < 1e-3:
        return f"{value * 1e6:.3g} µs"
    if magnitude < 1:
        return f"{value * 1e3:.3g} ms"
    return f"{value:.3g} s"


def signed(value: float) -> str:
    """A difference with its sign: +12.3 ms, -4.56 ms."""
    if value is None or math.isnan(value):
        return "n/a"
    return ("+" if value >= 0 else "-") + secs(abs(value))


def ratio(value: float, base: float) -> str:
    if not base or math.isnan(value) or math.isnan(base):
        return "n/a"
    return f"×{value / base:.3g}"


def table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# ---- the machine -----------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    """What RESULTS.md states about where it was measured (figures are only comparable within a run)."""
    cpu_model = ""
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    mem_kb = 0
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
                break
    nproc = subprocess.run(["nproc"], capture_output=True, text=True, check=False).stdout.strip()
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": nproc or str(os.cpu_count()),
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "cpu_model": cpu_model,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "loadavg": loadavg(),
        "git": f"{commit}{' (with uncommitted changes)' if dirty else ''}",
    }


def loadavg() -> str:
    with open("/proc/loadavg") as fh:
        return " ".join(fh.read().split()[:3])


# ---- memory of a process tree, from /proc ------------------------------------------------------------


def _proc_table() -> dict[int, tuple[int, int]]:
    """pid → (ppid, process group) for every process we can read."""
    out: dict[int, tuple[int, int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()  # the command name may contain spaces and parens
        out[int(entry)] = (int(fields[1]), int(fields[2]))
    return out


def rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def tree_of(roots: dict[str, int]) -> dict[str, list[int]]:
    """Each named root's processes: its process group (every stack child gets its own session)
    plus any descendant that left it. The Pub/Sub emulator's Java VM is a child of its launcher."""
    table = _proc_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out: dict[str, list[int]] = {}
    for name, root in roots.items():
        members = {pid for pid, (_, pgrp) in table.items() if pgrp == root}
        stack = [root]
        while stack:
            pid = stack.pop()
            if pid in table:
                members.add(pid)
            stack.extend(children.get(pid, []))
        out[name] = sorted(members)
    return out


class RssSampler:
    """Samples the summed RSS of named process trees every ``interval`` seconds; keeps the peak
    total and each component's own peak. Shared pages are counted once per process (RSS, not PSS),
    so the sum slightly overstates real use; that is the conservative direction for a peak."""

    def __init__(self, roots: Callable[[], dict[str, int]], interval: float = 0.5) -> None:
        self.roots = roots
        self.interval = interval
        self.peak_total = 0
        self.peak_at = 0.0
        self.peak_by_component: dict[str, int] = {}
        self.at_peak: dict[str, int] = {}
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._started = 0.0

    def start(self) -> RssSampler:
        self._started = time.monotonic()
        self._thread.start()
        return self

    def sample(self) -> None:
        by_component = {name: sum(rss_bytes(p) for p in pids) for name, pids in tree_of(self.roots()).items()}
        total = sum(by_component.values())
        self.samples += 1
        for name, value in by_component.items():
            self.peak_by_component[name] = max(self.peak_by_component.get(name, 0), value)
        if total > self.peak_total:
            self.peak_total, self.at_peak = total, by_component
            self.peak_at = time.monotonic() - self._started

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def mib(n: int) -> str:
    return f"{n / 1024 / 1024:.0f} MiB"


# ---- the local stack, as a benchmark drives it ---------------------------------------------------------


def request_document(request_id: str, *, fresh_cache: bool = True, **fields: Any) -> dict[str, Any]:
    """The request the benchmarks submit (``BenchStack.request`` writes it): ``fields`` on top."""
    doc: dict[str, Any] = {
        "model": "gemma4-26b",
        "hf_repo": "google/gemma-4-26b-a4b-it",
        "request_id": request_id,
        "retry": FAST_RETRY,
        **fields,
    }
    if fresh_cache:
        doc.setdefault("image", f"{IMAGE_REPO}:{request_id}")
    return doc


class BenchStack:
    """A `LocalStack` plus the clients a benchmark needs (the e2e tests' `Local`, trimmed)."""

    def __init__(
        self,
        name: str,
        *,
        timing: str,
        poll_seconds: int,
        faults: list[str] | None = None,
        child_env: dict[str, str] | None = None,
    ) -> None:
        """``child_env`` is set only while the stack's processes start (they inherit it), so the
        benchmark process itself never runs with, e.g., PYTHONPROFILEIMPORTTIME."""
        from rlpipe.local.stack import LocalStack, StackConfig

        self.root = CACHE / f"stack-{name}"
        self.requests_dir = CACHE / f"requests-{name}"
        self.requests_dir.mkdir(parents=True, exist_ok=True)
        self.config = StackConfig(
            root=self.root, timing=timing, poll_seconds=poll_seconds, faults=faults or []
        )
        self.stack = LocalStack(self.config, say=lambda text: say(f"{name}: {text.removeprefix('[local] ')}"))
        self._saved_env: dict[str, str] = {}
        self.child_env = dict(child_env or {})

    def __enter__(self) -> BenchStack:
        from rlpipe.control.adapters.blobstore import BlobStore, make_client
        from rlpipe.control.adapters.settings import Settings
        from rlpipe.control.lifecycle.ledger import Ledger

        for old in (self.root / "logs").glob("*.log"):  # the stack appends; a replay must not read old lines
            old.unlink()
        self._saved_env = dict(os.environ)
        os.environ.update(self.child_env)
        try:
            state = self.stack.start()
        finally:
            for key in self.child_env:
                if key in self._saved_env:
                    os.environ[key] = self._saved_env[key]
                else:
                    os.environ.pop(key, None)
        os.environ.update(state.env)
        self.state = state
        self.settings = Settings.from_env()
        self.client = make_client(self.settings.project)
        self.artifacts = BlobStore(self.client, self.settings.artifacts_bucket)
        self.state_store = BlobStore(self.client, self.settings.state_bucket)
        self.ledger = Ledger(self.state_store)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stack.stop()
        os.environ.clear()
        os.environ.update(self._saved_env)

    @property
    def pids(self) -> dict[str, int]:
        return {name: child.proc.pid for name, child in self.stack.children.items() if child.proc}

    def request(self, request_id: str | None = None, *, fresh_cache: bool = True, **fields: Any) -> Path:
        """A request file; ``fresh_cache`` gives it an image tag only it uses, so its conversion
        really runs instead of hitting another run's conversion cache."""
        import yaml

        request_id = request_id or f"b-{uuid.uuid4().hex[:12]}"
        doc = request_document(request_id, fresh_cache=fresh_cache, **fields)
        path = self.requests_dir / f"{request_id}.yaml"
        path.write_text(yaml.safe_dump(doc))
        return path

    @staticmethod
    def run_id_of(request_id: str) -> str:
        from rlpipe.core import identity

        return identity.run_id_for(identity.key_for_request_id(request_id))

    def submit(self, path: Path) -> tuple[str, str]:
        """Drop the file in the requests bucket, as a user would; (run id, object name)."""
        from rlpipe.cli import submit as submit_cli

        submitted = submit_cli.submit(self.settings, path, via="gcs", storage_client=self.client)
        return submitted.run_id, submitted.where.split("/", 3)[3]

    def object_created(self, bucket: str, name: str) -> float | None:
        """The server's creation time of an object (fake-gcs-server: microseconds, same clock)."""
        blob = self.client.bucket(bucket).get_blob(name)
        return blob.time_created.timestamp() if blob is not None and blob.time_created else None

    def wait(
        self,
        run_ids: Iterable[str],
        timeout: float,
        *,
        until: Callable[[Any], bool] | None = None,
        interval: float = 0.1,
    ) -> dict[str, Any]:
        """Records of every run once each is terminal (or ``until`` holds); missing ones stay None."""
        pending = set(run_ids)
        done: dict[str, Any] = {}
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for run_id in sorted(pending):
                record = self.ledger.get(run_id)
                if record is not None and (until(record) if until else record.terminal):
                    done[run_id] = record
                    pending.discard(run_id)
            if pending:
                time.sleep(interval)
        for run_id in pending:
            done[run_id] = self.ledger.get(run_id)
        return done

    def workloads(self) -> list[str]:
        import requests

        url = self.state.endpoints["simulator control"] + "/workloads"
        return list(requests.get(url, timeout=10).json()["workloads"])


def dump_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=str))


def count_requests(client: Any) -> list[str]:
    """The HTTP methods ``client`` (a google-cloud-storage Client) sends from now on, in order: a
    benchmark's requests counted on the real client's session, not estimated."""
    seen: list[str] = []
    session = client._http
    original = session.request

    def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        seen.append(method)
        return original(method, url, *args, **kwargs)

    session.request = request
    return seen
