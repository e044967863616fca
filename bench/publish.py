"""9. Publishing an export to the Hub: peak local disk and peak memory against shard size.

**What:** the publish program (``rlpipe.publisher.program``, run as the Job runs it: ``python -c
<source>``) publishing an export of 3 shards (plus config and index) from fake-gcs-server
to the Hub double, for each shard size: the peak bytes under its ``--tmpdir`` (sampled every 2 ms
by a thread walking the directory) and its peak resident memory (the child's ``VmHWM`` in
``/proc/<pid>/status``, read every 5 ms until it exits), with the wall time.

**Baselines, same run:** for disk, one shard (what the program promises: at most one shard on disk
at a time); for memory, the same interpreter importing the same libraries and doing nothing
(``python -c "from huggingface_hub import HfApi; import google.cloud.storage"``), so the difference
is what publishing itself costs.

The client uploads over LFS (``HF_HUB_DISABLE_XET=1``): the Hub double has no Xet. With ``hf_xet``
and the real Hub, the upload path (and its memory) is hf_xet's, not measured here.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import Section, say, table
from rlpipe.core.layout import EXPORT_MANIFEST

ROOT = Path(__file__).resolve().parents[1]
SOURCE = (ROOT / "shared" / "rlpipe" / "publisher" / "program.py").read_text()
TOKEN = "hf_" + "BenchWriteTokenForTheHubDouble0000"
MIB = 1 << 20
IMPORTS = "from huggingface_hub import HfApi, CommitOperationAdd; import google.cloud.storage"


class DiskSampler:
    """Peak bytes of the files under a directory, sampled by a thread."""

    def __init__(self, root: Path, interval: float = 0.002):
        self.root, self.interval = root, interval
        self.peak_bytes = self.peak_files = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            total = files = 0
            for path, _, names in os.walk(self.root):
                for name in names:
                    try:
                        total += os.stat(os.path.join(path, name)).st_size
                        files += 1
                    except OSError:
                        pass
            self.peak_bytes, self.peak_files = max(self.peak_bytes, total), max(self.peak_files, files)
            self._stop.wait(self.interval)

    def __enter__(self) -> DiskSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


def _hwm(pid: int) -> int:
    """The process's peak RSS so far (``VmHWM``, reset by exec), in bytes; 0 once it has exited."""
    try:
        with open(f"/proc/{pid}/status") as status:
            return next((int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:")), 0)
    except OSError:
        return 0


def _child(argv: list[str], env: dict[str, str]) -> tuple[int, int, float, str]:
    """(exit code, peak RSS bytes, wall seconds, output) of one python child.

    Not ``ru_maxrss``: on Linux a child's ``ru_maxrss`` keeps the parent's RSS at fork across the
    exec, so it would report this (large) process. ``VmHWM`` is the child's own and only grows, so
    its last reading before exit is the peak (up to the final ~5 ms, where the program only prints).
    """
    started = time.monotonic()
    peak = 0
    with tempfile.TemporaryFile("w+") as out:
        child = subprocess.Popen([sys.executable, *argv], env=env, stdout=out, stderr=subprocess.STDOUT)
        while True:
            peak = max(peak, _hwm(child.pid))
            if child.poll() is not None:
                break
            time.sleep(0.005)
        out.seek(0)
        return child.returncode, peak, time.monotonic() - started, out.read()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(8 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _shard(path: Path, size: int, seed: int) -> None:
    """A shard of ``size`` bytes, unique per seed (so the Hub double stores each one)."""
    block = hashlib.sha256(str(seed).encode()).digest() * (MIB // 32)
    with path.open("wb") as out:
        for _ in range(size // MIB):
            out.write(block)
            block = block[1:] + block[:1]


def run(args: argparse.Namespace) -> Section:
    from rlpipe.local.gcs import FakeGcs
    from rlpipe.local.hub_double import HubDouble

    started = time.monotonic()
    rows: list[list[str]] = []
    data: dict[str, Any] = {}
    ok = True
    with tempfile.TemporaryDirectory() as tmp, FakeGcs(Path(tmp)) as gcs:
        import google.cloud.storage as storage

        os.environ["STORAGE_EMULATOR_HOST"] = gcs.url
        client = storage.Client.create_anonymous_client()
        hub = HubDouble(store_dir=Path(tmp) / "hub").start()
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": tmp,
            "HF_HOME": f"{tmp}/hf-home",
            "HF_TOKEN": TOKEN,
            "HF_ENDPOINT": hub.url,
            "HF_HUB_DISABLE_XET": "1",
            "STORAGE_EMULATOR_HOST": gcs.url,
        }
        try:
            base_rss = min(_child(["-c", IMPORTS], env)[1] for _ in range(3))
            cases = [(mib, None) for mib in args.publish_shard_mib]
            if args.publish_budget_shards:
                mib = args.publish_shard_mib[len(args.publish_shard_mib) // 2]
                cases.append((mib, args.publish_budget_shards))
            for mib, budget_shards in cases:
                label = f"{mib} MiB" + (f", in flight ≤ {budget_shards} shards" if budget_shards else "")
                say(f"publish: {args.publish_shards} shards of {label}")
                # Names apart from the unbudgeted row's of the same size, whatever the budget.
                tag = f"{mib}-inflight{budget_shards}" if budget_shards else f"{mib}"
                bucket = client.create_bucket(f"bench-publish-{tag}")
                run_id = f"bench-{tag}"
                shard_path = Path(tmp) / "shard"
                # What the export Job's manifest lists (core/export_manifest.py): each file's path,
                # size and sha256, written last; publish pushes exactly these (--manifest).
                listed: list[dict[str, Any]] = []
                for i in range(1, args.publish_shards + 1):
                    _shard(shard_path, mib * MIB, seed=mib * 1000 + i + 100 * (budget_shards or 0))
                    name = f"model-{i:05d}-of-{args.publish_shards:05d}.safetensors"
                    bucket.blob(f"hf/{name}").upload_from_filename(str(shard_path))
                    listed.append({"path": name, "size": mib * MIB, "sha256": _sha256(shard_path)})
                shard_path.unlink()
                for name, body in (
                    ("config.json", "{}"),
                    ("model.safetensors.index.json", '{"weight_map": {}}'),
                ):
                    bucket.blob(f"hf/{name}").upload_from_string(body)
                    digest = hashlib.sha256(body.encode()).hexdigest()
                    listed.append({"path": name, "size": len(body.encode()), "sha256": digest})
                manifest = f"hf/{EXPORT_MANIFEST}"
                bucket.blob(manifest).upload_from_string(json.dumps({"files": listed}, sort_keys=True))
                bucket.blob("card/README.md").upload_from_string(f"---\nlicense: mit\n---\n# {run_id}\n")
                scratch = Path(tmp) / f"scratch-{run_id}"
                scratch.mkdir()
                argv = [
                    *("-c", SOURCE, "--source", f"gs://{bucket.name}/hf/"),
                    *("--manifest", f"gs://{bucket.name}/{manifest}"),
                    *("--card", f"gs://{bucket.name}/card/README.md", "--repo", f"bench/{run_id}"),
                    *("--run-id", run_id, "--request-id", run_id, "--tmpdir", str(scratch)),
                ]
                if budget_shards:
                    argv += ["--max-shard-bytes-in-flight", str(budget_shards * mib * MIB + MIB)]
                with DiskSampler(scratch) as disk:
                    code, rss, seconds, output = _child(argv, env)
                repo = hub.repos.get(f"bench/{run_id}")
                published = (
                    sum(f"rlpipe run {run_id} " in c.message for c in repo.commits.values()) if repo else 0
                )
                if code != 0 or published != 1:
                    ok = False
                    say(f"publish: FAILED ({code}, {published} commits): {output[-2000:]}")
                total = args.publish_shards * mib
                expected = (budget_shards or 1) * mib * MIB
                rows.append(
                    [
                        label,
                        f"{total} MiB",
                        f"{disk.peak_bytes / MIB:.1f} MiB ({disk.peak_files} files)",
                        f"×{disk.peak_bytes / expected:.2f}",
                        f"{rss / MIB:.0f} MiB",
                        f"{(rss - base_rss) / MIB:+.0f} MiB",
                        f"{seconds:.1f} s",
                        f"{total / seconds:.0f} MiB/s",
                    ]
                )
                data[label] = {
                    "shard_bytes": mib * MIB,
                    "shards": args.publish_shards,
                    "peak_disk_bytes": disk.peak_bytes,
                    "peak_disk_files": disk.peak_files,
                    "peak_rss_bytes": rss,
                    "baseline_rss_bytes": base_rss,
                    "seconds": seconds,
                    "exit_code": code,
                    "commits": published,
                }
        finally:
            hub.stop()
    header = [
        "shards of",
        "exported",
        "peak disk",
        "disk / budget",
        "peak RSS",
        "RSS over imports",
        "wall",
        "throughput",
    ]
    body = (
        __doc__.split("\n\n", 1)[1]
        + "\n\n"
        + f"Import baseline (peak RSS of the interpreter with the program's libraries): {base_rss / MIB:.0f} MiB.\n\n"
        + table(header, rows)
        + "\n\n**Reading it:** *disk / budget* is the peak over one shard (or over the in-flight budget's"
        " shards): about 1 means one shard at a time, whatever the shard size. *RSS over imports* is"
        " what publishing adds to the bare interpreter; flat across shard sizes means memory does not"
        " grow with the shard (the client hashes and sends files in chunks). Everything runs on one"
        " machine (fake GCS, the double and the program share its disk and CPUs), so the throughput"
        " is a local figure, not the Hub's.\n"
    )
    largest = data[f"{max(args.publish_shard_mib)} MiB"]
    headline = [
        (
            f"publish, {max(args.publish_shard_mib)} MiB shards: peak local disk",
            f"{largest['peak_disk_bytes'] / MIB:.0f} MiB",
            f"one shard: {max(args.publish_shard_mib)} MiB",
        ),
        (
            f"publish, {max(args.publish_shard_mib)} MiB shards: peak RSS",
            f"{largest['peak_rss_bytes'] / MIB:.0f} MiB",
            f"imports alone: {base_rss / MIB:.0f} MiB",
        ),
    ]
    return Section(
        "publish", "9. Publishing to the Hub", body, headline, data, time.monotonic() - started, ok
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--publish-shard-mib", type=int, nargs="+", default=[8, 32, 128])
    p.add_argument("--publish-shards", type=int, default=3)
    p.add_argument(
        "--publish-budget-shards",
        type=int,
        default=2,
        help="also run the middle shard size with --max-shard-bytes-in-flight of this many shards (0: skip)",
    )
    return p


if __name__ == "__main__":
    section = run(parser().parse_args())
    print(section.body)
    sys.exit(0 if section.ok else 1)
