"""11. A team's limits at plan: the usage document against counting the ledgers at every plan.

**What:** HTTP requests and wall time of the stage plan's admission under a team's limits
(``control.lifecycle.team_usage``) in a state bucket of ``--team-ledgers`` runs (a quarter of them
the team's, ``--team-holders`` of those still running): one plan that goes on (one read and one
write of ``teams/<team>/usage.json``), and one at the limit, which also reads the running runs'
ledgers to find any that ended unseen. And the size of the document.

**Baseline, same run:** counting from the ledgers, which is what building the document costs
(``TeamUsageStore.seed``: the delimiter listing of ``runs/`` and one GET per ledger, 16 at a time);
a count at every plan would pay it every time, and still not be race-safe. Both talk to
fake-gcs-server through the real ``google-cloud-storage`` client; requests are counted on the
client's HTTP session.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.common import Section, count_requests, say, table


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.team_limits", description=__doc__)
    p.add_argument("--team-ledgers", type=int, default=2000, help="runs in the state bucket (all teams)")
    p.add_argument("--team-holders", type=int, default=8, help="of the team's, still running")
    p.add_argument("--team-reps", type=int, default=5, help="timed admissions per row (median reported)")
    return p


def run(args: argparse.Namespace) -> Section:
    import os

    from rlpipe.control.adapters.blobstore import BlobStore, make_client
    from rlpipe.control.lifecycle.ledger import Ledger
    from rlpipe.control.lifecycle.team_usage import TeamUsageStore
    from rlpipe.core import layout
    from rlpipe.core.request import validate_request
    from rlpipe.core.runs.record import Attempt, RunRecord, Source, now
    from rlpipe.core.teams import Limits, Team
    from rlpipe.local.gcs import FakeGcs

    started = time.monotonic()
    n, holding, reps = args.team_ledgers, args.team_holders, args.team_reps
    request = validate_request({"model": "gemma4-26b", "hf_repo": "google/gemma-4-26b-a4b-it"}).model_dump(
        mode="json"
    )
    teams = ("vision", "speech", "audio", "text")
    rows: list[list[str]] = []
    data: dict[str, Any] = {}
    ok = True
    with tempfile.TemporaryDirectory() as tmp, FakeGcs(Path(tmp)) as gcs:
        os.environ["STORAGE_EMULATOR_HOST"] = gcs.url
        client = make_client("bench")
        store = BlobStore(client, client.create_bucket("bench-state").name)
        ledger = Ledger(store)
        stamp = now()

        def claim(i: int) -> None:
            team = teams[i % len(teams)]
            running = team == "vision" and i // len(teams) < holding
            record = RunRecord(
                run_id=f"rteam{i:07d}",
                key=str(i),
                source=Source(kind="gcs", team=team),
                request=request,
                state="training" if running else "succeeded",
                attempts=[
                    Attempt(
                        stage="train",
                        attempt=1,
                        workload="w",
                        launched_at=stamp,
                        finished_at=None if running else stamp,
                        chip_hours=3.0,
                    )
                ],
            )
            record.lineage.hf_sha = "0" * 40
            ledger.claim(record)

        say(f"team limits: writing {n} ledgers")
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(claim, range(n)))
        seen = count_requests(client)
        usage = TeamUsageStore(store, ledger, poll_seconds=300)

        seen.clear()
        t0 = time.perf_counter()
        seeded = usage.seed("vision")
        count_seconds, counted = time.perf_counter() - t0, len(seen)
        ok &= len(seeded.holders) == holding
        rows.append(
            [
                f"count from the ledgers ({n:,} runs; baseline)",
                str(counted),
                f"{count_seconds:.3f} s",
            ]
        )
        data["count"] = {"requests": counted, "seconds": count_seconds, "holders": len(seeded.holders)}

        team = Team(name="vision", limits=Limits(active_runs=holding + 1, monthly_chip_hours=1e9))

        def new_run(run_id: str) -> RunRecord:
            record = RunRecord(
                run_id=run_id, key=run_id, source=Source(kind="gcs", team="vision"), request=request
            )
            ledger.claim(record)
            return record

        first = new_run("rfirst")  # the document exists from here on (built by this first plan)
        usage.admit(team, first)
        usage.release(first)

        def admissions(label: str, expect: str) -> None:
            nonlocal ok
            times, counts = [], []
            for rep in range(reps):
                run = new_run(f"rask{rep:03d}{expect}")
                seen.clear()
                t0 = time.perf_counter()
                decision = usage.admit(team, run)
                times.append(time.perf_counter() - t0)
                counts.append(len(seen))
                ok &= decision.outcome == expect
                if decision.outcome == "admitted":
                    usage.release(run)
            median = statistics.median(times)
            rows.append([label, str(int(statistics.median(counts))), f"{median:.3f} s"])
            data[label] = {"requests": statistics.median(counts), "seconds": median}

        admissions("plan that goes on (the document)", "admitted")
        ok &= usage.admit(team, new_run("rblocker")).outcome == "admitted"  # now at the limit
        admissions(f"plan at the limit (+ {holding + 1} running runs' ledgers)", "wait")
        size = len(store.read(layout.team_usage("vision")).data)
        data["document_bytes"] = size
    body = (
        __doc__.split("\n\n", 1)[1]
        + "\n\n"
        + table(["what", "HTTP requests", "wall time"], rows)
        + f"\n\nThe document held {holding + 1} running runs, {reps} queued and this month's ended runs: "
        f"{size:,} bytes. **Reading it:** a plan's cost does not grow with the bucket; only the running runs "
        "are read, and only when a plan would wait. The count grows with every run ever made, whichever "
        "team's: it is paid once per team, when its document does not exist yet.\n"
    )
    on = data["plan that goes on (the document)"]
    headline = [
        (
            f"a plan's admission under its team's limits, {n:,} runs in the bucket",
            f"{on['requests']:g} requests, {on['seconds'] * 1000:.0f} ms",
            f"counting the ledgers: {counted} requests, {count_seconds * 1000:.0f} ms",
        )
    ]
    return Section(
        "team", "11. A team's limits at plan", body, headline, data, time.monotonic() - started, ok=ok
    )


if __name__ == "__main__":
    section = run(parser().parse_args())
    print(section.body)
