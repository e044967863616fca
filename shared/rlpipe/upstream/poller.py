"""The poll of each watch entry: from a branch head to a release, a wait, or a reason to ignore it.

Per entry, in order (see ``upstream.py`` for why this order):

1. ``model_info(branch, files_metadata=True)``: head sha and the content id of each file.
2. First sight → the head is the *baseline* (no run). Head already decided → nothing to do.
3. Trigger files unchanged against the processed sha (README-only commit) → ignored, recorded.
4. ``auth_check`` with the pipeline's token → without access: one status message ("accept the
   license for this account"), recorded, no run; checked again every tick.
5. Weights present, and every shard named in the index present? Else wait (upload in progress).
6. Quiet for ``debounce_minutes`` since the commit (its date in the commit log)? Else wait
   (multi-commit uploads settle).
7. ``Intake.submit`` with ``hf_revision`` pinned to the sha; recorded as processed only after
   intake accepted it (a crash in between is retried next tick; intake's key makes that harmless).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from rlpipe.control.adapters.logs import Logger
from rlpipe.control.adapters.notify import Notice, Notifier
from rlpipe.control.adapters.settings import Settings
from rlpipe.core import identity
from rlpipe.core.problems import RequestInvalid
from rlpipe.core.request import validate_request
from rlpipe.core.request.policy import Policy
from rlpipe.core.runs.record import Source
from rlpipe.upstream.hub_calls import (
    Head,
    HubProblem,
    HubReader,
    NoAccess,
    NotFound,
    RateLimited,
    Refused,
    Unavailable,
)
from rlpipe.upstream.poll_outcomes import EntryOutcome, Outcome, PollReport
from rlpipe.upstream.release import (
    INDEX,
    WEIGHT_SUFFIX,
    Changes,
    describe_ignored,
    describe_release,
    diff,
    hhmm,
    index_shards,
    matcher,
    missing_shards,
    short,
)
from rlpipe.upstream.state import Decision, Examined, Release, Snapshot, StateStore, WatchState
from rlpipe.upstream.state import NoAccess as NoAccessRecord
from rlpipe.upstream.watchlist import RejectedEntry, WatchEntry, WatchList

if TYPE_CHECKING:
    from rlpipe.control.lifecycle.intake import Intake
    from rlpipe.control.lifecycle.intake_result import IntakeResult

ACCEPTED = frozenset({"started", "duplicate"})  # intake outcomes after which the release is processed


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Poller:
    hub: HubReader
    state: StateStore
    log: Logger
    intake: Intake | None = None  # None: dry runs only
    settings: Settings = field(default_factory=Settings)
    publish: Callable[[str, dict[str, Any]], Any] | None = None
    clock: Callable[[], datetime] = utc_now
    after_submit: Callable[[IntakeResult], None] | None = None  # test hook: a crash between intake and state

    def policy_for(self, team: str | None) -> Policy:
        """The allowlists a release's request for ``team`` (its watch entry's) is checked against:
        the ones intake will check it against, so that an entry is refused when the list is read
        rather than at each release. A team's own lists on a deployment that declares teams (a
        team this deployment does not declare: the deployment's, and intake refuses the run,
        naming the teams)."""
        if self.intake is not None:
            return self.intake.policy.for_team_named(self.intake.teams, team)
        return self.settings.policy().for_team_named(self.settings.teams(), team)

    def poll(
        self, watch: WatchList, *, repo: str | None = None, branch: str | None = None, dry_run: bool = False
    ) -> PollReport:
        """One cycle over the enabled entries (optionally one repo/branch only)."""
        if not dry_run and self.intake is None:
            raise ValueError("a poll that may submit needs an intake")
        outcomes: list[EntryOutcome] = []
        for bad in watch.rejected:
            if (repo is None or bad.hf_repo == repo) and (branch is None or bad.branch == branch):
                outcomes.append(self._rejected(bad))
        for entry in watch.entries:
            if (repo is not None and entry.hf_repo != repo) or (
                branch is not None and entry.branch != branch
            ):
                continue
            try:
                outcome = self._poll_entry(entry, dry_run)
            except Exception as exc:  # one entry's surprise must not cost the others their tick
                self.log.error(
                    "upstream poll failed",
                    repo=entry.hf_repo,
                    branch=entry.branch,
                    error=f"{type(exc).__name__}: {exc}",
                )
                outcome = EntryOutcome(
                    entry.hf_repo,
                    entry.branch,
                    "error",
                    f"unexpected {type(exc).__name__}: {exc}; retried at the next tick",
                    reason="unexpected",
                    watch=entry.key,
                )
            outcomes.append(outcome)
        for o in outcomes:
            level = {"error": "ERROR", "no-access": "WARNING"}.get(o.outcome, "INFO")
            self.log.log(
                level,
                f"upstream {o.outcome}: {o.detail}",
                repo=o.repo,
                branch=o.branch,
                sha=o.sha,
                reason=o.reason,
                run_id=o.run_id,
                dry_run=dry_run,
            )
        return PollReport(tuple(outcomes), dry_run, self.clock().isoformat())

    # ---- one entry --------------------------------------------------------------------------

    def _poll_entry(self, entry: WatchEntry, dry_run: bool) -> EntryOutcome:
        out = _Out(entry)
        if not entry.enabled:
            return out("ignored", "disabled (enabled: false in the watch list)", reason="disabled")
        state = self._state(entry)
        try:
            head = self.hub.head(entry.hf_repo, entry.branch)
        except HubProblem as exc:
            return self._hub_problem(entry, state, None, exc, dry_run)
        s = short(head.sha)
        if state is None or state.baseline is None:
            detail = (
                f"baseline {s}: first poll of this watch entry; later commits that change "
                "trigger files start runs"
            )
            self._record(entry, dry_run, lambda st: _baseline(st, head, detail))
            return out("ignored", detail, sha=head.sha, reason="baseline")
        if state.examined is not None and state.examined.sha == head.sha:
            return out(
                "ignored",
                _unchanged(state),
                sha=head.sha,
                reason="unchanged",
                run_id=state.last_release.run_id
                if state.examined.outcome == "released" and state.last_release
                else None,
            )
        trigger = diff(state.baseline.files, head.files, matcher(entry.trigger_files))
        if not trigger:
            compared = state.baseline
            previous = state.examined.files if state.examined is not None else compared.files
            other = diff(previous, head.files)
            detail = f"ignored {s}: {describe_ignored(other)}"
            self._record(entry, dry_run, lambda st: _ignored(st, head, compared, detail))
            return out("ignored", detail, sha=head.sha, reason="no-trigger-change", changed=other.names)
        try:
            self.hub.check_access(entry.hf_repo)
            missing, total = self._missing_shards(entry, head)
            committed = self._commit_time(entry, head)
        except HubProblem as exc:
            return self._hub_problem(entry, state, head.sha, exc, dry_run)
        except ValueError as exc:
            return out(
                "error",
                f"release {s}: {exc}; checked again at the next tick",
                sha=head.sha,
                reason="bad-index",
                changed=trigger.names,
            )
        if not any(name.endswith(WEIGHT_SUFFIX) for name in head.files):
            return out(
                "waiting",
                f"waiting: {s} has no {WEIGHT_SUFFIX} weights (old shards deleted before the "
                "new ones landed?)",
                sha=head.sha,
                reason="no-weights",
                changed=trigger.names,
            )
        if missing:
            return out(
                "waiting",
                f"waiting: upload in progress: {len(missing)} of {total} shards named in "
                f"{INDEX} are missing at {s} ({', '.join(missing[:3])}"
                f"{' …' if len(missing) > 3 else ''})",
                sha=head.sha,
                reason="upload-in-progress",
                changed=trigger.names,
            )
        if committed is not None:
            until = committed + timedelta(minutes=entry.debounce_minutes)
            if self.clock() < until:
                return out(
                    "waiting",
                    f"waiting: debounce until {hhmm(until)} (release {s} committed at "
                    f"{hhmm(committed)}; {entry.debounce_minutes} quiet minutes let multi-commit "
                    "uploads settle)",
                    sha=head.sha,
                    reason="debounce",
                    wait_until=until.isoformat(),
                    changed=trigger.names,
                )
        return self._release(entry, head, trigger, dry_run)

    def _commit_time(self, entry: WatchEntry, head: Head) -> datetime | None:
        """The commit's own date, from its entry in the commit log (what ``lastModified`` means
        for a revision is not documented; it is only the fallback). No debounce, no request."""
        if entry.debounce_minutes <= 0:
            return None
        return self.hub.commit_time(entry.hf_repo, head.sha) or head.last_modified

    def _missing_shards(self, entry: WatchEntry, head: Head) -> tuple[list[str], int]:
        if INDEX not in head.files:
            return [], 0
        index = self.hub.read_index(entry.hf_repo, head.sha)
        return missing_shards(index, head.files), len(index_shards(index))

    def _release(self, entry: WatchEntry, head: Head, trigger: Changes, dry_run: bool) -> EntryOutcome:
        out = _Out(entry)
        key = entry.release_key(head.sha)
        run_id = identity.run_id_for(key)  # templates never carry request_id, so the key names the run
        what = f"new release {short(head.sha)}: {describe_release(trigger)}"
        doc = entry.request_document(head.sha)
        try:
            request = validate_request(doc, self.policy_for(entry.team))
        except RequestInvalid as exc:
            return out(
                "error",
                f"{what}, but the template no longer makes a valid request "
                f"({len(exc.problems)} problems); fix the watch entry",
                sha=head.sha,
                reason="invalid-request",
                problems=tuple(exc.problems),
                changed=trigger.names,
            )
        if dry_run:
            return out(
                "released",
                f"would start run {run_id}: {what}",
                sha=head.sha,
                reason="release",
                run_id=run_id,
                changed=trigger.names,
            )
        assert self.intake is not None
        log = self.log.bind(repo=entry.hf_repo, sha=head.sha)
        result = self.intake.submit(
            json.dumps(doc, sort_keys=True).encode(),
            Source(kind="upstream", name=entry.hf_repo, generation=head.sha, team=entry.team),
            key,
            source_name=f"hf:{entry.hf_repo}@{short(head.sha)}",
            log=log,
            request=request,
        )
        if self.after_submit is not None:
            self.after_submit(result)
        if result.outcome in ACCEPTED:
            detail = f"{what}; run {result.run_id}" + (
                " (already started)" if result.outcome == "duplicate" else ""
            )
            self._record(
                entry, dry_run, lambda st: _released(st, head, result.run_id or run_id, key, trigger, detail)
            )
            return out(
                "released",
                detail,
                sha=head.sha,
                reason="release",
                run_id=result.run_id,
                changed=trigger.names,
            )
        if result.outcome == "start-in-progress":
            return out(
                "waiting",
                f"waiting: run {result.run_id} for release {short(head.sha)} is being started "
                "by another poll; confirmed at the next tick",
                sha=head.sha,
                reason="start-in-progress",
                run_id=result.run_id,
                changed=trigger.names,
            )
        return out(
            "error",
            f"{what}, but intake answered {result.outcome}: {result.detail}",
            sha=head.sha,
            reason=f"intake-{result.outcome}",
            run_id=result.run_id,
            changed=trigger.names,
        )

    # ---- failures ---------------------------------------------------------------------------

    def _hub_problem(
        self, entry: WatchEntry, state: WatchState | None, sha: str | None, exc: HubProblem, dry_run: bool
    ) -> EntryOutcome:
        out = _Out(entry)
        if isinstance(exc, NoAccess):
            return self._no_access(entry, state, sha, dry_run)
        if isinstance(exc, RateLimited):
            return out(
                "waiting", f"waiting: {exc}", sha=sha, reason="rate-limited", wait_until=exc.until.isoformat()
            )
        reason = {NotFound: "not-found", Unavailable: "hub-unavailable", Refused: "hub-refused"}.get(
            type(exc), "hub"
        )
        return out("error", str(exc), sha=sha, reason=reason)

    def _no_access(
        self, entry: WatchEntry, state: WatchState | None, sha: str | None, dry_run: bool
    ) -> EntryOutcome:
        url = f"{self.hub.endpoint}/{entry.hf_repo}"
        message = (
            f"no access: {entry.hf_repo} is gated and the pipeline's Hugging Face token cannot read it; "
            f"accept the license for this account (the one that owns the pipeline's token) at {url}"
        )
        if sha:
            message += f"; release {short(sha)} starts at the first poll after that"
        outcome = _Out(entry)("no-access", message, sha=sha, reason="gated")
        if dry_run:
            return outcome
        seen = state.no_access if state is not None else None
        if seen is not None and seen.sha == sha and seen.notified:
            return outcome
        notified = self._notify(entry, sha, message)
        if seen is None or seen.sha != sha or notified:
            self._record(entry, dry_run, lambda st: _denied(st, sha, message, notified))
        return outcome

    def _notify(self, entry: WatchEntry, sha: str | None, message: str) -> bool:
        body = {
            "kind": "upstream",
            "state": "no-access",
            "repo": entry.hf_repo,
            "branch": entry.branch,
            "sha": sha,
            "watch": entry.key,
            "message": message,
        }
        # Best-effort: a message must never break the poll; one not sent is sent at the next tick.
        notice = Notice("the no-access message", body, entry.template.get("notify"), {"repo": entry.hf_repo})
        return Notifier(self.settings, self.publish, self.log).send(notice)

    def _rejected(self, bad: RejectedEntry) -> EntryOutcome:
        count = len(bad.problems)
        first = f"; first: {bad.problems[0]}" if bad.problems else ""
        if not bad.enabled:
            return EntryOutcome(
                bad.hf_repo,
                bad.branch,
                "ignored",
                f"disabled, and watch[{bad.index}] is invalid ({count} problems)",
                reason="disabled",
                problems=bad.problems,
            )
        return EntryOutcome(
            bad.hf_repo,
            bad.branch,
            "error",
            f"watch[{bad.index}] is invalid ({count} problem{'s' if count != 1 else ''}) and is "
            f"not polled{first}",
            reason="invalid-entry",
            problems=bad.problems,
        )

    # ---- state --------------------------------------------------------------------------------

    def _record(
        self, entry: WatchEntry, dry_run: bool, change: Callable[[WatchState], WatchState | None]
    ) -> None:
        if dry_run:
            return

        def apply(current: WatchState | None) -> WatchState | None:
            found = current if current is not None else self._state(entry)
            base = (
                found.model_copy(deep=True)
                if found is not None
                else WatchState(branch=entry.branch, template_hash=entry.template_hash)
            )
            return change(base)

        self.state.update(entry.hf_repo, entry.key, apply)

    def _state(self, entry: WatchEntry) -> WatchState | None:
        """The entry's state; for a team's entry without one yet, the state of the slot it had
        before the team was part of it (its baseline and last release carry over)."""
        state = self.state.get(entry.hf_repo, entry.key)
        if state is None and entry.team:
            state = self.state.get(entry.hf_repo, entry.slot_before_teams)
        return state


class _Out:
    """EntryOutcome for one entry, without repeating repo/branch/key at every return."""

    def __init__(self, entry: WatchEntry):
        self.entry = entry

    def __call__(self, outcome: Outcome, detail: str, **fields: Any) -> EntryOutcome:
        return EntryOutcome(
            self.entry.hf_repo, self.entry.branch, outcome, detail, watch=self.entry.key, **fields
        )


# State changes. Each may run again after a lost compare-and-swap, on the winner's state, so each
# decides from the state it is given (None = nothing to write).


def _baseline(st: WatchState, head: Head, detail: str) -> WatchState | None:
    if st.baseline is not None:
        return None
    st.baseline = Snapshot(sha=head.sha, files=head.files)
    st.examined = Examined(sha=head.sha, files=head.files, outcome="baseline")
    st.remember(Decision(sha=head.sha, outcome="baseline", detail=detail))
    return st


def _ignored(st: WatchState, head: Head, compared: Snapshot, detail: str) -> WatchState | None:
    if (
        st.baseline is None
        or st.baseline.sha != compared.sha
        or (st.examined and st.examined.sha == head.sha)
    ):
        return None  # someone moved the state meanwhile: the next tick decides again
    st.examined = Examined(sha=head.sha, files=head.files, outcome="ignored")
    st.remember(Decision(sha=head.sha, outcome="ignored", detail=detail))
    return st


def _released(
    st: WatchState, head: Head, run_id: str, key: str, trigger: Changes, detail: str
) -> WatchState | None:
    if st.examined is not None and st.examined.sha == head.sha and st.examined.outcome == "released":
        return None
    st.baseline = Snapshot(sha=head.sha, files=head.files)
    st.examined = Examined(sha=head.sha, files=head.files, outcome="released")
    st.last_release = Release(sha=head.sha, run_id=run_id, key=key, changed=list(trigger.names))
    st.no_access = None
    st.remember(Decision(sha=head.sha, outcome="released", detail=detail))
    return st


def _denied(st: WatchState, sha: str | None, message: str, notified: bool) -> WatchState | None:
    seen = st.no_access
    if seen is not None and seen.sha == sha and (seen.notified or not notified):
        return None
    st.no_access = NoAccessRecord(sha=sha, message=message, notified=notified)
    st.remember(Decision(sha=sha, outcome="no-access", detail=message))
    return st


def _unchanged(state: WatchState) -> str:
    examined = state.examined
    assert examined is not None
    s = short(examined.sha)
    if examined.outcome == "released" and state.last_release is not None:
        return f"unchanged: {s} was released as run {state.last_release.run_id}"
    if examined.outcome == "baseline":
        return f"unchanged: {s} is the baseline; waiting for a commit that changes trigger files"
    return f"unchanged: {s} was examined and ignored (no trigger file changed)"
