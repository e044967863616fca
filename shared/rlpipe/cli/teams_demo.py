"""``make demo SCENARIO=teams``: two teams on one local stack (examples/teams/teams.yaml).

What it shows, each from what the pipeline recorded, never from what the demo asked for:

* both teams submit at once, each where only it may: vision drops its request in its folder
  ``requests/vision/``, speech publishes its own on its topic ``rlpipe-requests-speech``; each run
  is its team's (``RunRecord.team``) and its workloads are in its team's namespace (the cluster's
  own listing);
* a team takes its chips back: vision's training runs on chips speech left idle; when speech wants
  them, Kueue evicts vision's training for ``InCohortReclamation`` and vision's run resumes from its
  last checkpoint as after any preemption. On the double this eviction is PLAYED (a fault of the
  cluster simulator, ``evict@<step>:cohort-reclamation``). The real control plane plays no faults:
  there each team has its own ClusterQueue (vision owning no chips, speech the plane's slice;
  docs/teams-local.md, "Kueue"), and whether Kueue reclaims depends on whose training is admitted
  first, so the demo does not claim it;
* a request of vision's that names speech's Secret, dropped in vision's folder as any client with
  write access to it could: intake refuses it naming the field and vision's allowlist (its error
  record, as ``rlpipe status`` reads it);
* a team's sweep with more children than the team's places for sweep children: speech's three
  children against ``limits.sweep_children: 2``; a child gives its place back when it reaches the
  selection, so the sweep ends with a winner (docs/teams.md, "When a run holds a place");
* a per-team summary from the ledgers: runs, their states and the TPU chip-hours their attempts held.

Why a follower of its own: several runs of two teams at once, so one line is printed whenever a
run changes, with its team and namespace, instead of one run's stages.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from rlpipe.core import identity, layout
from rlpipe.core.runs.record import RunRecord

if TYPE_CHECKING:
    from rlpipe.control.adapters.settings import Settings
    from rlpipe.control.lifecycle.ledger import Ledger
    from rlpipe.core.teams import Team
    from rlpipe.local.stack import LocalStack

TEAMS_FILE = Path("examples/teams/teams.yaml")
BORROWER, OWNER = "vision", "speech"  # vision borrows speech's idle chips; speech takes them back
# Each team's request, and how it arrives: vision's in its folder, speech's on its topic.
REQUESTS: dict[str, tuple[Path, str]] = {
    BORROWER: (Path("examples/teams/vision.yaml"), "gcs"),
    OWNER: (Path("examples/teams/speech.yaml"), "pubsub"),
}
CROSS_TEAM = Path("examples/teams/vision-names-speech-secret.yaml")
# speech's sweep, more children than its places for sweep children, published on its topic too.
TEAM_SWEEP: tuple[str, Path, str] = (OWNER, Path("examples/teams/speech-sweep.yaml"), "pubsub")
# vision checkpoints every 10 steps (examples/teams/vision.yaml): taken back at step 33, it resumes at 30.
RECLAIM_STEP = 33
RECLAIM_WORDS = "reclamation within the cohort"  # Kueue's words for InCohortReclamation (preemption.go:158)
Say = Callable[[str], None]


def _print(text: str) -> None:
    print(text, flush=True)


def reclaim_fault(run_id: str) -> dict[str, Any]:
    """The played reclamation: Kueue evicts this run's first training attempt (only this run's)."""
    return {
        "stage": "train",
        "attempt": 1,
        "fault": f"evict@{RECLAIM_STEP}:cohort-reclamation",
        "run": run_id,
    }


def planned_run_id(path: Path, team: Team) -> str:
    """The run a team's request will be, known before it is sent: its request_id in its team's
    folder (intake's key, control/lifecycle/intake.py), so the played fault can name it first."""
    request_id = str(yaml.safe_load(path.read_text(encoding="utf-8"))["request_id"])
    return identity.run_id_for(identity.key_for_request_id(request_id, team.folder))


@dataclass
class Followed:
    """One run as the demo follows it: its team, what was last printed, the namespaces seen."""

    team: str
    run_id: str
    last: str = ""
    namespaces: set[str] = field(default_factory=set)
    ended: set[tuple[str, int]] = field(default_factory=set)  # (stage, attempt) whose end was said
    resumed: set[tuple[str, int]] = field(default_factory=set)  # (stage, attempt) whose resume was said
    record: RunRecord | None = None
    # a sweep: at most this many of its team's sweep children may hold a place at once
    sweep_places: int | None = None

    def workload_prefixes(self) -> list[str]:
        """Whose workloads are this run's: a sweep's parent runs none, its children do."""
        if self.record is not None and self.record.sweep is not None:
            return list(self.record.sweep.children)
        return [self.run_id]


def run(
    stack: LocalStack,
    settings: Settings,
    ledger: Ledger,
    *,
    cluster: str,
    timeout: float,
    started: float,
    say: Say = _print,
) -> int:
    """The scenario on a started stack; 0 when everything happened as it should."""
    from rlpipe.cli import submit as submit_cli

    teams = settings.teams()  # the stack said where each team's requests arrive and runs go
    borrower = teams.named(BORROWER)
    assert borrower is not None, f"{TEAMS_FILE} declares {BORROWER}"
    vision_run = planned_run_id(REQUESTS[BORROWER][0], borrower)
    played = cluster == "double"
    if played:
        stack.set_faults([reclaim_fault(vision_run)])
        say(
            f"[played on the double] speech's quota is idle, so vision's training may borrow it; at step "
            f"{RECLAIM_STEP} speech takes its chips back and Kueue evicts vision's training "
            "(InCohortReclamation)."
        )
    else:
        say(
            "[real control plane] each team has its own ClusterQueue in cohort rlpipe-teams (vision owns "
            "no chips and borrows speech's idle ones): if vision's training is admitted first, speech's takes "
            "the chips back for real; the demo does not time it, so it does not check it here"
        )

    followed: list[Followed] = []
    sweep_team = teams.named(TEAM_SWEEP[0])
    places = sweep_team.limits.sweep_children if sweep_team is not None else None
    for name, path, via in [*((n, p, v) for n, (p, v) in REQUESTS.items()), TEAM_SWEEP]:  # all at once
        submitted = submit_cli.submit(settings, path, via=via, team=name)
        how = "dropped in its folder" if via == "gcs" else "published on its topic"
        say(f"{name}: {path} {how}: {submitted.where}")
        is_sweep = path == TEAM_SWEEP[1]
        if is_sweep:
            say(
                f"{name}: a sweep of 3 children; the team lets {places} of its sweep children hold a place at once"
            )
        followed.append(Followed(name, submitted.run_id, sweep_places=places if is_sweep else None))

    refusal = _refused_cross_team(settings, ledger, borrower, timeout=60, say=say)
    _follow(stack, ledger, followed, timeout=timeout, say=say)

    records = [f.record for f in followed if f.record is not None]
    say("")
    say(team_summary(_team_records(ledger, teams.names()), refused={BORROWER: 1 if refusal else 0}))
    from rlpipe.cli.watch import where_it_ran

    events = stack.state.events if stack.state is not None else "pubsub"
    say("\n".join(where_it_ran(cluster, events)))
    say(f"  wall time   {time.monotonic() - started:.1f}s")
    checks = outcome_checks(
        followed, refusal, played=played, namespaces={t.name: t.k8s_namespace for t in teams}
    )
    for what, ok in checks:
        say(f"  {'ok ' if ok else 'NOT'}  {what}")
    return 0 if checks and all(ok for _, ok in checks) and len(records) == len(followed) else 1


def _refused_cross_team(
    settings: Settings, ledger: Ledger, team: Team, *, timeout: float, say: Say
) -> dict[str, Any] | None:
    """Drop the cross-team request in the team's folder unchecked (``rlpipe submit`` would refuse
    it before uploading) and print intake's refusal from its error record."""
    from rlpipe.control.adapters.blobstore import make_client

    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    name = f"{layout.REQUESTS_PREFIX}{team.folder}/{CROSS_TEAM.stem}-{stamp}{CROSS_TEAM.suffix}"
    blob = make_client(settings.project).bucket(settings.requests_bucket).blob(name)
    blob.upload_from_string(CROSS_TEAM.read_bytes(), if_generation_match=0)
    delivery = identity.run_id_for(identity.key_for_object(settings.requests_bucket, name, blob.generation))
    say(
        f"{team.name}: {CROSS_TEAM} dropped in its folder unchecked (as gsutil would): gs://{settings.requests_bucket}/{name}"
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rejection = ledger.rejection(delivery)
        if rejection is not None:
            for line in refusal_lines(rejection):
                say(f"  {line}")
            return rejection
        time.sleep(0.5)
    say(f"  intake recorded no refusal within {timeout:g}s")
    return None


def refusal_lines(rejection: Mapping[str, Any]) -> list[str]:
    """Intake's refusal as its error record holds it: each field, what is wrong, the allowlist."""
    lines = ["refused by intake (its error record):"]
    for problem in rejection.get("problems") or []:
        lines.append(f"  {problem.get('path') or '(document)'}: {problem.get('message')}")
        if problem.get("fix"):
            lines.append(f"    fix: {problem['fix']}")
    return lines


def _follow(stack: LocalStack, ledger: Ledger, runs: list[Followed], *, timeout: float, say: Say) -> None:
    """Print each run's changes (state, stage, attempt; an attempt's end and a resume; the
    namespace its workloads are in) until every run has ended or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        placed = stack.placed()
        for run in runs:
            run.record = ledger.get(run.run_id) or run.record
            for workload, namespace in placed.items():
                mine = any(workload.startswith(prefix) for prefix in run.workload_prefixes())
                if mine and namespace not in run.namespaces:
                    run.namespaces.add(namespace)
                    say(f"{run.team} {run.run_id}: {workload} is in namespace {namespace}")
            if run.record is not None:
                for line in _changes(run, run.record):
                    say(f"{run.team} {run.run_id}: {line}")
        if runs and all(r.record is not None and r.record.terminal for r in runs):
            return
        time.sleep(0.5)
    say(f"not every run ended within {timeout:g}s")


def _changes(run: Followed, record: RunRecord) -> list[str]:
    lines = []
    for a in record.attempts:
        if a.resume_step and (a.stage, a.attempt) not in run.resumed:
            run.resumed.add((a.stage, a.attempt))
            lines.append(f"{a.stage} attempt {a.attempt} resumes from its step-{a.resume_step} checkpoint")
        if a.failure_class and (a.stage, a.attempt) not in run.ended:
            run.ended.add((a.stage, a.attempt))
            lines.append(f"{a.stage} attempt {a.attempt} ended {a.failure_class}: {a.reason or ''}")
    now = record.state + (
        f" ({record.stage} attempt {record.attempt})" if record.stage and not record.terminal else ""
    )
    if now != run.last:
        run.last = now
        lines.append(now)
    return lines


def _team_records(ledger: Ledger, names: Iterable[str]) -> list[RunRecord]:
    records = [ledger.get(run_id) for run_id in ledger.list_run_ids()]
    return [r for r in records if r is not None and r.team in set(names)]


def chip_hours(record: RunRecord) -> float:
    """The TPU chip-hours a run's attempts held, as each attempt's last status read recorded them."""
    return sum(a.chip_hours or 0.0 for a in record.attempts)


def team_summary(records: Iterable[RunRecord], refused: Mapping[str, int] | None = None) -> str:
    """Per team, from the ledgers: its runs, how many are in each state, the chip-hours its runs'
    attempts held, and how many of its requests intake refused (``refused``, from the error records)."""
    by_team: dict[str, list[RunRecord]] = {}
    for record in records:
        by_team.setdefault(record.team, []).append(record)
    refused = dict(refused or {})
    teams = sorted(set(by_team) | set(refused))
    lines = [f"  {'team':<10}{'runs':>5}  {'states':<28}{'chip-h':>9}{'refused':>9}"]
    for team in teams:
        runs = by_team.get(team, [])
        states: dict[str, int] = {}
        for record in runs:
            states[record.state] = states.get(record.state, 0) + 1
        described = ", ".join(f"{n} {state}" for state, n in sorted(states.items())) or "-"
        hours = sum(chip_hours(r) for r in runs)
        lines.append(f"  {team:<10}{len(runs):>5}  {described:<28}{hours:>9.3f}{refused.get(team, 0):>9}")
    return "\n".join(["per team (from the ledgers):", *lines])


def outcome_checks(
    runs: list[Followed], refusal: Mapping[str, Any] | None, *, played: bool, namespaces: Mapping[str, str]
) -> list[tuple[str, bool]]:
    """What must have happened for the demo to pass, each as (what, whether it did)."""
    checks: list[tuple[str, bool]] = []
    for run in runs:
        record = run.record
        checks.append(
            (f"{run.team}'s run {run.run_id} succeeded", record is not None and record.state == "succeeded")
        )
        checks.append(
            (f"{run.team}'s run is recorded as {run.team}'s", record is not None and record.team == run.team)
        )
        checks.append(
            (
                f"{run.team}'s workloads were in {namespaces[run.team]} only",
                run.namespaces == {namespaces[run.team]},
            )
        )
    if played:
        vision = next((r.record for r in runs if r.team == BORROWER), None)
        train = [a for a in (vision.attempts if vision else []) if a.stage == "train"]
        checks.append(
            (
                f"{BORROWER}'s training was taken back ({RECLAIM_WORDS}) and classed preempted",
                bool(train)
                and train[0].failure_class == "preempted"
                and RECLAIM_WORDS in (train[0].reason or ""),
            )
        )
        checks.append(
            (
                f"{BORROWER}'s next training attempt resumed from a checkpoint",
                len(train) > 1 and bool(train[1].resume_step),
            )
        )
        if run.sweep_places is not None:
            sweep = record.sweep if record is not None else None
            checks.append(
                (
                    f"{run.team}'s sweep of {len(sweep.children) if sweep else '?'} children, with "
                    f"{run.sweep_places} places for them, ended with a winner",
                    sweep is not None
                    and sweep.selection is not None
                    and run.sweep_places < len(sweep.children),
                )
            )
    problems = (refusal or {}).get("problems") or []
    checks.append(
        (
            f"the cross-team request was refused naming hf_token_secret and teams.{BORROWER}.read_secrets",
            any(
                p.get("path") == "hf_token_secret"
                and f"teams.{BORROWER}.read_secrets" in (p.get("fix") or "")
                for p in problems
            ),
        )
    )
    return checks
