"""2. Function cold start: the import cost every new function instance pays before its first answer.

All entry points live in one module (``functions/main.py``), so every deployed function imports all
of it. Measured, as the median over ``--cold-reps`` (``--cold-entry-reps`` for first calls) fresh
interpreters, after one unmeasured warm-up so bytecode caches are warm as in a deployed image:

* ``import main`` with ``functions/`` as the working directory (what each instance loads);
* per entry point, ``import main; main.<entry>`` plus the modules that entry imports lazily on its
  first call. Those are *discovered*, not guessed: a local stack runs with
  ``PYTHONPROFILEIMPORTTIME=1`` in the function processes, each entry is driven once for real
  (a request through all three stages by file and by Pub/Sub, an upstream tick, a signed webhook;
  an entry the stack does not serve, such as ``reconcile``, gets its own server with the stack's
  environment and a Scheduler-style tick), and every top-level import logged after the server
  started, minus what a bare functions-framework server imports when it serves its first event,
  is that entry's lazy set. The entry points are read from ``main.py``'s decorators;
* the baseline: a module that only imports ``functions_framework``;
* "before": ``main.py`` with the eager module-level imports it had before the lazy-import change
  (``EAGER_IMPORTS``, added to the current file's imports), to show what the change saves.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import statistics
import subprocess
import time
from pathlib import Path

from bench.common import CACHE, PYTHON, ROOT, BenchStack, Section, loadavg, say, secs, signed, table

FUNCTIONS_DIR = ROOT / "functions"
# main.py's module-level import before the lazy-import change (functions/main.py up to commit a52a829).
EAGER_IMPORTS = "from rlpipe.control import services  # noqa: F401  (eager, as before the change)\n"
_DECORATED = re.compile(r"^@functions_framework\.(cloud_event|http)\s*\ndef (\w+)\(", re.MULTILINE)
MARKER = "functions_framework._http.gunicorn"  # the server starts after main is loaded
WEBHOOK_SECRET = "bench-webhook-secret"  # only for the throw-away discovery stack


# ---- discovering each entry's first-call imports --------------------------------------------------------


def entry_points(source: Path = FUNCTIONS_DIR / "main.py") -> dict[str, str]:
    """name → "cloud_event" | "http" for every decorated function in main.py, in file order (read
    from the file, so a new entry point is benchmarked without touching this module)."""
    return {m[2]: m[1] for m in _DECORATED.finditer(source.read_text())}


def _roots_after_marker(log_text: str) -> list[str]:
    """Top-level (outermost) imports logged by -X importtime after the server started, in order.

    Each interpreter prints a header line first; only the last interpreter that reached the
    marker counts (a log may hold several starts)."""
    roots: list[str] = []
    seen_marker = False
    for line in log_text.splitlines():
        if not line.startswith("import time:") or line.count("|") != 2:
            continue
        name_field = line.split("|")[2]
        if "imported package" in name_field:  # a new interpreter's header
            if not seen_marker:
                roots = []
            continue
        if name_field.startswith("  "):  # nested: imported by something already listed
            continue
        name = name_field.strip()
        if name == MARKER:
            seen_marker, roots = True, []
        elif seen_marker and name not in roots:
            roots.append(name)
    return roots


def _bare_server_roots(workdir: Path) -> set[str]:
    """What functions-framework itself imports once it serves a first CloudEvent (excluded)."""
    import requests
    from cloudevents.conversion import to_binary
    from cloudevents.http import CloudEvent

    from rlpipe.local.ports import free_port
    from rlpipe.local.procs import Child, http_ready

    source = workdir / "bare_server" / "main.py"
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_text(
        "import functions_framework\n\n\n@functions_framework.cloud_event\n"
        "def noop(cloud_event):\n    return None\n"
    )
    port = free_port()
    log = workdir / "bare_server.log"
    log.unlink(missing_ok=True)
    child = Child(
        "bare",
        [
            PYTHON,
            "-m",
            "functions_framework",
            "--target",
            "noop",
            "--source",
            str(source),
            "--signature-type",
            "cloudevent",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        log_path=log,
        env={"PYTHONPROFILEIMPORTTIME": "1"},
    ).start()
    try:
        url = f"http://127.0.0.1:{port}/"
        child.wait_ready(http_ready(url, lambda status, body: True), timeout=60)
        headers, body = to_binary(
            CloudEvent({"type": "bench.noop", "source": "//bench", "id": "1"}, {"x": 1})
        )
        requests.post(url, headers=headers, data=body, timeout=30)
        time.sleep(0.3)
    finally:
        child.stop()
    return set(_roots_after_marker(log.read_text(errors="replace")))


def _drive_extra(s: BenchStack, entry: str, kind: str, workdir: Path) -> tuple[str, str]:
    """An entry point the local stack does not serve (e.g. ``reconcile``): its own functions-framework
    process with the stack's environment, driven once by a Scheduler-style Pub/Sub tick (cloud
    events) or an empty JSON POST (http). Returns (its log, how it was driven)."""
    import requests

    from rlpipe.local.ports import free_port
    from rlpipe.local.procs import Child, http_ready
    from rlpipe.local.shim import deliver, message_published

    port = free_port()
    log = workdir / f"extra-{entry}.log"
    log.unlink(missing_ok=True)
    signature = "cloudevent" if kind == "cloud_event" else "http"
    child = Child(
        entry,
        [
            PYTHON,
            "-m",
            "functions_framework",
            "--target",
            entry,
            "--source",
            str(FUNCTIONS_DIR / "main.py"),
            "--signature-type",
            signature,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        log_path=log,
        env={"PYTHONPROFILEIMPORTTIME": "1"},
        cwd=ROOT,
    ).start()
    try:
        url = f"http://127.0.0.1:{port}/"
        child.wait_ready(http_ready(url, lambda status, body: True), timeout=60)
        if kind == "cloud_event":
            topic = f"projects/{s.settings.project}/topics/rlpipe-{entry}-tick"
            event = message_published(
                topic,
                "projects/local/subscriptions/bench",
                b"{}",
                {},
                f"tick-{entry}",
                time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            )
            how = f"a Pub/Sub tick → {'2xx' if deliver(url, event, timeout=120) else 'error'}"
        else:
            how = f"POST {{}} → {requests.post(url, json={}, timeout=120).status_code}"
        time.sleep(0.3)
    finally:
        child.stop()
    return log.read_text(errors="replace"), how


def discover(workdir: Path, entries: dict[str, str]) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Drive every entry point once on a real local stack; (entry → lazily imported roots, entry →
    how it was driven)."""
    import requests
    import yaml

    from rlpipe.local.stack import FUNCTIONS

    child_env = {"PYTHONPROFILEIMPORTTIME": "1", "RLPIPE_WEBHOOK_SECRET": WEBHOOK_SECRET}
    with BenchStack("coldstart-discovery", timing="zero", poll_seconds=2, child_env=child_env) as s:
        # intake_object, artifact_event (objects and signals) and stage: one run by file drop.
        by_file, _ = s.submit(s.request())
        # intake_message: the same by Pub/Sub.
        from rlpipe.cli import submit as submit_cli

        by_message = submit_cli.submit(s.settings, s.request(), via="pubsub", storage_client=s.client).run_id
        # upstream_poll: a tick with a watch list in place (the demo's, debounce 0).
        watch = yaml.safe_load((ROOT / "examples" / "upstream" / "watch.yaml").read_text())
        for entry in watch["watch"]:
            entry["debounce_minutes"] = 0
        s.client.bucket(s.settings.requests_bucket).blob("config/watch.yaml").upload_from_string(
            yaml.safe_dump(watch)
        )
        s.stack.upstream_tick()
        # upstream_webhook: a signed Hub webhook after a release (it polls that repo and submits).
        release = s.stack.hub_release("google/gemma-4-26b-a4b-it")
        payload = {
            "event": {"action": "update", "scope": "repo.content"},
            "repo": {"type": "model", "name": "google/gemma-4-26b-a4b-it"},
            "updatedRefs": [{"ref": "refs/heads/main", "oldSha": "0" * 40, "newSha": release["sha"]}],
        }
        hook = requests.post(
            s.state.endpoints["function upstream_webhook"],
            json=payload,
            headers={"X-Webhook-Secret": WEBHOOK_SECRET},
            timeout=60,
        )
        records = s.wait([by_file, by_message], timeout=90)
        states = {run_id: (r.state if r else None) for run_id, r in records.items()}
        say(f"cold start discovery: runs {states}, webhook {hook.status_code}")
        how = {
            "intake_object": "a request file through all three stages",
            "intake_message": "a request by Pub/Sub through all three stages",
            "artifact_event": "every object of those two runs",
            "stage": "every call of those two runs",
            "upstream_poll": "a tick with the example watch list",
            "upstream_webhook": f"a signed webhook after a Hub release → {hook.status_code}",
        }
        logs = {
            e: (s.root / "logs" / f"{e}.log").read_text(errors="replace") for e in entries if e in FUNCTIONS
        }
        for entry, kind in entries.items():
            if entry not in FUNCTIONS:
                logs[entry], driven = _drive_extra(s, entry, kind, workdir)
                how[entry] = f"its own server with the stack's environment, {driven}"
    bare = _bare_server_roots(workdir)
    lazy = {entry: [m for m in _roots_after_marker(text) if m not in bare] for entry, text in logs.items()}
    return lazy, {entry: how.get(entry, "?") for entry in entries}


# ---- measuring ------------------------------------------------------------------------------------------


def _variant_dirs(workdir: Path) -> dict[str, Path]:
    bare = workdir / "bare"
    bare.mkdir(parents=True, exist_ok=True)
    (bare / "main.py").write_text("import functions_framework  # noqa: F401\n")
    eager = workdir / "eager"
    eager.mkdir(parents=True, exist_ok=True)
    source = (FUNCTIONS_DIR / "main.py").read_text()
    future = "from __future__ import annotations\n"
    eager_source = (
        source.replace(future, future + EAGER_IMPORTS, 1) if future in source else EAGER_IMPORTS + source
    )
    (eager / "main.py").write_text(eager_source)
    return {"bare": bare, "current": FUNCTIONS_DIR, "eager": eager}


def _snippet(entry: str | None, roots: list[str]) -> str:
    """The code one fresh interpreter runs; it ends by printing how many modules it loaded
    (negligible next to the imports, and it saves a separate run per variant)."""
    code = "import main\n"
    if entry:
        code += f"main.{entry}\n"
    if roots:
        code += (
            f"import importlib\nfor _m in {roots!r}:\n    try:\n        importlib.import_module(_m)\n"
            "    except Exception:\n        pass\n"
        )
    return code + "import sys\nprint(len(sys.modules))\n"


def _time_once(code: str, cwd: Path) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds user+sys, modules loaded) of one fresh interpreter. CPU time is
    reported too because a shared machine's load moves wall time far more than it moves CPU time."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPROFILEIMPORTTIME"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([PYTHON, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"cold start variant failed in {cwd}:\n{code}\n{done.stderr[-2000:]}")
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return elapsed, cpu, int(done.stdout.strip().splitlines()[-1])


def _measure(
    variants: dict[str, tuple[str, Path]],
    reps: int,
    warm_up_in: Path | None = None,
    *,
    warm_measured: bool = True,
) -> tuple[dict[str, dict[str, list[float]]], dict[str, int], dict[str, int]]:
    """Interleaved (one of each per round), so drifting machine load hits every variant alike.

    Returns (times, modules loaded, modules loaded by the unmeasured warm-up). ``warm_up_in``
    runs each warm-up in another directory (the eager main), which also answers, for free,
    whether that main changes what a first call ends up loading. ``warm_measured=False`` (a smoke
    run) skips the warm-ups that only steady the measured figures."""
    warm = (
        {name: _time_once(code, warm_up_in or cwd)[2] for name, (code, cwd) in variants.items()}
        if warm_measured or warm_up_in is not None
        else {}
    )
    if warm_up_in is not None and warm_measured:  # the measured directories need their own warm-up too
        for code, cwd in variants.values():
            _time_once(code, cwd)
    out: dict[str, dict[str, list[float]]] = {name: {"wall": [], "cpu": []} for name in variants}
    modules: dict[str, int] = {}
    for _ in range(reps):
        for name, (code, cwd) in variants.items():
            wall, cpu, modules[name] = _time_once(code, cwd)
            out[name]["wall"].append(wall)
            out[name]["cpu"].append(cpu)
    return out, modules, warm


def run(args: argparse.Namespace) -> Section:
    started = time.monotonic()
    workdir = CACHE / "cold-start"
    workdir.mkdir(parents=True, exist_ok=True)
    entries_in_main = entry_points()
    say(f"cold start: discovering the first-call imports of {', '.join(entries_in_main)} on a local stack")
    lazy, driven = discover(workdir, entries_in_main)
    entry_names = tuple(entries_in_main)  # every entry point in main.py, in file order
    dirs = _variant_dirs(workdir)

    imports = {
        "bare": (_snippet(None, []), dirs["bare"]),
        "main": (_snippet(None, []), dirs["current"]),
        "eager": (_snippet(None, []), dirs["eager"]),
    }
    # Entries whose discovered sets are identical are measured once and reported for each.
    entries: dict[str, tuple[str, Path]] = {
        "artifact_event (non-signal)": (_snippet("artifact_event", []), dirs["current"]),
    }
    measured_as: dict[str, str] = {}
    for entry in entry_names:
        twin = next((e for e in measured_as if set(lazy.get(e, [])) == set(lazy.get(entry, []))), None)
        measured_as[entry] = measured_as[twin] if twin else entry
        if not twin:
            entries[entry] = (_snippet(entry, lazy.get(entry, [])), dirs["current"])
    say(
        f"cold start: {len(imports)} import variants × {args.cold_reps} and {len(entries)} first-call "
        f"variants × {args.cold_entry_reps} fresh interpreters, interleaved"
    )
    # A smoke run (correctness only) skips the warm-ups whose only use is steadier figures; the
    # eager main's run stays, since the same-modules column is read from it.
    steady = not getattr(args, "smoke", False)
    import_times, import_modules, _ = _measure(imports, args.cold_reps, warm_measured=steady)
    entry_times, entry_modules, eager_modules = _measure(
        entries, args.cold_entry_reps, warm_up_in=dirs["eager"], warm_measured=steady
    )
    times = import_times | entry_times
    modules = import_modules | entry_modules
    wall = {name: statistics.median(t["wall"]) for name, t in times.items()}
    cpu = {name: statistics.median(t["cpu"]) for name, t in times.items()}
    # With the eager main, does an entry's first call end up with the same modules? Same set = same cost.
    same = {entry: modules[measured_as[entry]] == eager_modules[measured_as[entry]] for entry in entry_names}

    def row(label: str, name: str, *extra: object) -> list[object]:
        if name == "bare":
            return [label, secs(wall[name]), "", "", secs(cpu[name]), "", modules[name], *extra]
        return [
            label,
            secs(wall[name]),
            signed(wall[name] - wall["bare"]),
            f"×{wall[name] / wall['bare']:.2f}",
            secs(cpu[name]),
            signed(cpu[name] - cpu["bare"]),
            modules[name],
            *extra,
        ]

    head = [
        "what is imported",
        "wall, median",
        "vs baseline",
        "ratio",
        "CPU, median",
        "vs baseline",
        "modules",
    ]
    import_rows = [
        row("bare module, `import functions_framework` only (**baseline**)", "bare"),
        row("`import main` (current: lazy `rlpipe.control.services`)", "main"),
        row("`import main` as before the change (eager `rlpipe.control.services`)", "eager"),
    ]
    entry_rows = [
        row(
            "`artifact_event`, non-signal object (the hot path: nothing imported on call)",
            "artifact_event (non-signal)",
            0,
            "n/a",
        )
    ]
    for entry in entry_names:
        name = measured_as[entry]
        label = f"`{entry}`" + (", first completion signal" if entry == "artifact_event" else ", first call")
        if name != entry:
            label += f" (same imports as `{name}`: measured once)"
        entry_rows.append(row(label, name, len(lazy.get(entry, [])), "yes" if same[entry] else "**no**"))
    saved_wall, saved_cpu = wall["eager"] - wall["main"], cpu["eager"] - cpu["main"]
    body = (
        f"Median over fresh `python -c` interpreters (`import main`: {args.cold_reps} each; first-call rows: "
        f"{args.cold_entry_reps} each, fewer to keep `make bench` short), interleaved, after one warm-up each. "
        "Wall time is the whole process, interpreter start-up included (in the baseline too). CPU time "
        "(user+sys of the child) is shown beside it because other work on a shared machine moves wall time "
        f"much more than CPU time (load average at the end: {loadavg()}).\n\n"
        + table(head, import_rows)
        + f"\n\nThe lazy import of `rlpipe.control.services` in `functions/main.py` saves **{secs(saved_wall)} wall / "
        f"{secs(saved_cpu)} CPU per instance start** (`import main` {secs(wall['eager'])} → {secs(wall['main'])}). "
        "Entries that use the ledger import it on their first call instead, so their first-call cost is "
        "unchanged (last column: the same modules end up loaded either way).\n\n"
        + table([*head, "first-call roots", "same modules with eager main"], entry_rows)
        + "\n\n<details><summary>Discovered first-call imports (top-level modules, in order), and how each entry "
        "was driven</summary>\n\n"
        + "\n".join(
            f"- `{entry}` ({driven.get(entry)}): "
            + (", ".join(f"`{m}`" for m in lazy.get(entry, [])[:30]) or "(none)")
            + (f" … (+{len(lazy[entry]) - 30} more)" if len(lazy.get(entry, [])) > 30 else "")
            for entry in entry_names
        )
        + "\n\n</details>"
    )
    headline = [
        (
            "`import main` (every function instance start)",
            f"{secs(wall['main'])} wall, {secs(cpu['main'])} CPU",
            f"bare functions_framework {secs(wall['bare'])} ({signed(wall['main'] - wall['bare'])}); "
            f"before the lazy import {secs(wall['eager'])} (saves {secs(saved_wall)})",
        ),
    ]
    data = {
        "times": times,
        "wall_median": wall,
        "cpu_median": cpu,
        "modules": modules,
        "lazy": lazy,
        "same_modules_with_eager_main": same,
        "reps": args.cold_reps,
        "entry_reps": args.cold_entry_reps,
    }
    return Section(
        "cold", "2. Function cold start", body, headline, data=data, seconds=time.monotonic() - started
    )


if __name__ == "__main__":  # a quick look without the rest of the suite
    with contextlib.suppress(KeyboardInterrupt):
        section = run(argparse.Namespace(cold_reps=5, cold_entry_reps=3))
        print(section.body)
        print(json.dumps(section.data["wall_median"], indent=2))
