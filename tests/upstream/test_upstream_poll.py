"""The upstream poller on the real chain: fake-gcs-server, the Hub double reached by the real
huggingface_hub client, and intake starting executions on the recording Executions server."""

from __future__ import annotations

import copy
import dataclasses
import json
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from rlpipe.control.adapters.logs import Logger
from rlpipe.control.adapters.orchestrator import Orchestrator
from rlpipe.control.adapters.settings import Settings
from rlpipe.control.lifecycle.intake import Intake, IntakeResult
from rlpipe.core.runs.record import RunRecord
from rlpipe.local.hub_double import (
    HubDouble,
    HubFile,
    model_files,
    safetensors_index,
    shard_file,
    shard_names,
)
from rlpipe.upstream.hub_calls import RateLimitBudget
from rlpipe.upstream.service import EntryOutcome, Poller, PollReport, build_poller, check, run_poll
from rlpipe.upstream.state import state_path
from rlpipe.upstream.watchlist import WATCH_LIST, template_hash
from rlpipe.upstream.webhook import handle_webhook
from tests.conftest import Buckets

TOKEN = "pipeline-read-token"
T0 = datetime(2026, 12, 2, 14, 0, tzinfo=UTC)
TEMPLATE = {"model": "gemma4-26b", "preset": "v6e-32", "labels": {"trigger": "upstream"}}
SECRET = "hook-secret"


@pytest.fixture(scope="module")
def hub() -> Iterator[HubDouble]:
    server = HubDouble().start()
    yield server
    server.stop()


@dataclass
class Chain:
    buckets: Buckets
    executions: Any
    hub: HubDouble
    settings: Settings
    now: list[datetime] = field(default_factory=lambda: [T0])
    sleeps: list[float] = field(default_factory=list)
    published: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def clock(self) -> datetime:
        return self.now[0]

    def advance(self, minutes: float) -> None:
        self.now[0] += timedelta(minutes=minutes)

    def intake(self, **kwargs: Any) -> Intake:
        return Intake(
            requests=self.buckets.store("requests"),
            ledger=self.buckets.ledger(),
            orchestrator=Orchestrator(self.settings),
            log=Logger("test-intake"),
            **kwargs,
        )

    def poller(self, *, intake: Intake | None = None, **kwargs: Any) -> Poller:
        poller = build_poller(
            self.settings,
            Logger("test-upstream"),
            client=self.buckets.client,
            intake=intake or self.intake(),
            token=TOKEN,
            clock=self.clock,
            sleep=self.sleeps.append,
            publish=lambda topic, message: self.published.append((topic, message)),
            **kwargs,
        )
        return poller

    def poll(self, *, poller: Poller | None = None, **kwargs: Any) -> PollReport:
        return run_poll(
            self.settings,
            Logger("test-upstream"),
            client=self.buckets.client,
            poller=poller or self.poller(),
            **kwargs,
        )

    def watch(self, *entries: dict[str, Any]) -> None:
        data = yaml.safe_dump({"watch": list(entries)}).encode()
        self.buckets.client.bucket(self.buckets.requests).blob(WATCH_LIST).upload_from_string(data)

    def state(self, repo: str) -> dict[str, Any]:
        return self.buckets.store("state").read(state_path(repo)).json()

    def runs(self) -> list[RunRecord]:
        ledger = self.buckets.ledger()
        return [r for r in (ledger.get(i) for i in ledger.list_run_ids()) if r is not None]

    def new_repo(self, **kwargs: Any) -> str:
        repo = f"org-{uuid.uuid4().hex[:8]}/model"
        self.hub.add_repo(repo, at=T0 - timedelta(hours=3), **kwargs)
        return repo

    def release(self, repo: str, seed: str, *, minutes_ago: float = 120, shards: int = 2) -> str:
        """A commit that replaces every weight shard (new content) and the index."""
        names = shard_names(shards)
        changes: dict[str, HubFile | None] = {n: shard_file(n, seed) for n in names}
        changes["model.safetensors.index.json"] = safetensors_index(names)
        return self.hub.push(
            repo, changes, message=f"release {seed}", at=self.clock() - timedelta(minutes=minutes_ago)
        )


@pytest.fixture
def chain(buckets: Buckets, executions: Any, hub: HubDouble, monkeypatch: pytest.MonkeyPatch) -> Chain:
    import huggingface_hub.constants

    for name, value in hub.client_constants().items():
        monkeypatch.setattr(huggingface_hub.constants, name, value)
    settings = Settings(
        project="rlpipe-test",
        workflows_endpoint=executions.target,
        requests_bucket=buckets.requests,
        artifacts_bucket=buckets.artifacts,
        state_bucket=buckets.state,
        status_topic="rlpipe-status",
    )
    return Chain(buckets, executions, hub, settings)


def entry(repo: str, **fields: Any) -> dict[str, Any]:
    return {"hf_repo": repo, "template": copy.deepcopy(TEMPLATE), **fields}  # no YAML aliases


def only(report: PollReport, repo: str | None = None) -> EntryOutcome:
    found = [o for o in report.outcomes if repo is None or o.repo == repo]
    assert len(found) == 1, report.render()
    return found[0]


def test_first_poll_is_a_baseline_then_a_new_release_starts_one_pinned_run(chain: Chain) -> None:
    repo = chain.new_repo()
    chain.watch(entry(repo))
    first = only(chain.poll())
    assert (first.outcome, first.reason) == ("ignored", "baseline") and chain.executions.creates() == []

    sha = chain.release(repo, "v2", shards=2)
    released = only(chain.poll())
    assert released.outcome == "released" and released.sha == sha
    assert released.detail.startswith(f"new release {sha[:7]}: 2 weight files changed")
    [run] = chain.runs()
    assert chain.executions.creates() == [{"run_id": run.run_id}] and released.run_id == run.run_id
    assert run.request["hf_revision"] == sha and run.lineage.hf_revision == sha
    assert run.request["hf_repo"] == repo and run.request["labels"] == {"trigger": "upstream"}
    assert run.key == f"hf:{repo}@{sha}:{template_hash(TEMPLATE)}"
    assert (run.source.kind, run.source.name, run.source.generation) == ("upstream", repo, sha)

    state = chain.state(repo)["watches"][f"main@{template_hash(TEMPLATE)}"]
    assert state["baseline"]["sha"] == sha and state["examined"]["outcome"] == "released"
    assert state["last_release"]["run_id"] == run.run_id
    assert [h["outcome"] for h in state["history"]] == ["baseline", "released"]

    again = only(chain.poll())
    assert (again.outcome, again.reason) == ("ignored", "unchanged") and run.run_id in again.detail
    assert len(chain.executions.creates()) == 1
    # The watcher's state and the run's ledger are the control plane's: none in the artifacts bucket.
    assert list(chain.buckets.store("artifacts").list("")) == []
    assert chain.buckets.store("state").exists(state_path(repo))


def test_readme_only_commit_is_ignored_and_recorded(chain: Chain) -> None:
    repo = chain.new_repo()
    chain.watch(entry(repo))
    chain.poll()
    sha = chain.hub.push(
        repo,
        {"README.md": HubFile.of("README.md", "# better card\n")},
        message="card",
        at=T0 - timedelta(hours=1),
    )
    ignored = only(chain.poll())
    assert (ignored.outcome, ignored.sha) == ("ignored", sha)
    assert ignored.detail == f"ignored {sha[:7]}: only README.md changed"
    state = chain.state(repo)["watches"][f"main@{template_hash(TEMPLATE)}"]
    assert state["examined"] == {**state["examined"], "sha": sha, "outcome": "ignored"}
    assert state["baseline"]["sha"] != sha  # releases are still measured against the processed sha

    checks = len(chain.hub.paths(f"/api/models/{repo}/auth-check"))
    assert only(chain.poll()).reason == "unchanged"
    assert len(chain.hub.paths(f"/api/models/{repo}/auth-check")) == checks  # not examined again

    sha2 = chain.hub.push(
        repo, {"config.json": HubFile.of("config.json", '{"rope_theta": 1}')}, at=T0 - timedelta(minutes=45)
    )
    released = only(chain.poll())
    assert released.outcome == "released" and released.sha == sha2
    assert released.changed == ("config.json",)  # the README edit is not part of the release
    assert chain.executions.creates() == [{"run_id": released.run_id}]


def test_the_same_release_seen_by_concurrent_polls_is_one_run(chain: Chain) -> None:
    repo = chain.new_repo()
    chain.watch(entry(repo))
    chain.poll()
    chain.release(repo, "v2")
    pollers = [chain.poller() for _ in range(4)]
    start = threading.Barrier(len(pollers))
    reports: list[PollReport] = []

    def go(poller: Poller) -> None:
        start.wait()
        reports.append(chain.poll(poller=poller))

    threads = [threading.Thread(target=go, args=(p,)) for p in pollers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    outcomes = [only(r) for r in reports]
    assert {o.outcome for o in outcomes} <= {"released", "waiting"}
    assert any(o.outcome == "released" for o in outcomes)
    assert len({o.run_id for o in outcomes}) == 1
    assert len(chain.executions.creates()) == 1 and len(chain.runs()) == 1
    after = only(chain.poll())
    assert after.outcome in ("ignored", "released") and len(chain.executions.creates()) == 1


def test_a_webhook_and_a_poll_for_the_same_sha_make_one_run(chain: Chain) -> None:
    repo = chain.new_repo()
    chain.watch(entry(repo))
    chain.poll()
    sha = chain.release(repo, "v2")

    def poll_one(name: str, branch: str) -> list[dict[str, Any]]:
        return [o.as_dict() for o in chain.poll(repo=name, branch=branch).outcomes]

    body = json.dumps(
        {
            "event": {"action": "update", "scope": "repo.content"},
            "repo": {"type": "model", "name": repo, "headSha": sha},
            "updatedRefs": [{"ref": "refs/heads/main", "oldSha": "0" * 40, "newSha": sha}],
        }
    ).encode()
    status, answer = handle_webhook({"X-Webhook-Secret": SECRET}, body, secret=SECRET, poll_one=poll_one)
    assert status == 200 and answer["results"]["main"][0]["outcome"] == "released"
    tick = only(chain.poll())
    assert tick.sha == sha and tick.reason == "unchanged"
    assert len(chain.executions.creates()) == 1


def test_a_crash_between_intake_and_the_state_write_is_retried_harmlessly(chain: Chain) -> None:
    repo = chain.new_repo()
    chain.watch(entry(repo))
    chain.poll()
    sha = chain.release(repo, "v2")

    def crash(result: IntakeResult) -> None:
        raise RuntimeError("function instance killed")

    crashed = only(chain.poll(poller=dataclasses.replace(chain.poller(), after_submit=crash)))
    assert crashed.outcome == "error" and "killed" in crashed.detail
    assert (
        chain.state(repo)["watches"][f"main@{template_hash(TEMPLATE)}"]["examined"]["outcome"] == "baseline"
    )
    retried = only(chain.poll())
    assert retried.outcome == "released" and retried.sha == sha and "already started" in retried.detail
    assert len(chain.executions.creates()) == 1


def test_a_start_interrupted_after_the_claim_is_finished_by_a_later_poll(chain: Chain) -> None:
    repo = chain.new_repo()
    chain.watch(entry(repo))
    chain.poll()
    sha = chain.release(repo, "v2")
    lease_clock = [1000.0]

    def killed(run_id: str) -> None:
        raise RuntimeError("instance killed after the claim")

    def poller(**kwargs: Any) -> Poller:
        return chain.poller(intake=chain.intake(clock=lambda: lease_clock[0], **kwargs))

    assert only(chain.poll(poller=poller(after_claim=killed))).outcome == "error"
    # The dead poll's start lease is still live: another poll must wait, and must not mark the
    # release processed, or nobody would ever start the run.
    waiting = only(chain.poll(poller=poller()))
    assert (waiting.outcome, waiting.reason) == ("waiting", "start-in-progress")
    key = f"main@{template_hash(TEMPLATE)}"
    assert chain.state(repo)["watches"][key]["examined"]["outcome"] == "baseline"
    assert chain.executions.creates() == []
    lease_clock[0] += 120  # the lease expired
    released = only(chain.poll(poller=poller()))
    assert released.outcome == "released" and released.sha == sha
    assert chain.executions.creates() == [{"run_id": released.run_id}]


def test_an_upload_in_progress_waits_until_every_shard_of_the_index_is_there(chain: Chain) -> None:
    repo = chain.new_repo()
    chain.watch(entry(repo))
    chain.poll()
    names = shard_names(3)
    partial = chain.hub.push(
        repo,
        {
            "model.safetensors.index.json": safetensors_index(names),
            names[0]: shard_file(names[0], "v3"),
            names[1]: shard_file(names[1], "v3"),
        },
        message="upload 1/2",
        at=T0 - timedelta(hours=2),
    )
    waiting = only(chain.poll())
    assert (waiting.outcome, waiting.reason, waiting.sha) == ("waiting", "upload-in-progress", partial)
    assert waiting.detail.startswith("waiting: upload in progress: 1 of 3 shards")
    assert names[2] in waiting.detail and chain.executions.creates() == []

    done = chain.hub.push(
        repo, {names[2]: shard_file(names[2], "v3")}, message="upload 2/2", at=T0 - timedelta(hours=1)
    )
    released = only(chain.poll())
    assert released.outcome == "released" and released.sha == done
    [run] = chain.runs()
    assert run.request["hf_revision"] == done and len(chain.executions.creates()) == 1


def test_debounce_waits_for_quiet_after_the_last_commit(chain: Chain) -> None:
    repo = chain.new_repo()
    chain.watch(entry(repo, debounce_minutes=30))
    chain.poll()
    chain.release(repo, "v2", minutes_ago=10)  # committed 13:50
    waiting = only(chain.poll())
    assert waiting.outcome == "waiting" and waiting.detail.startswith("waiting: debounce until 14:20 UTC")

    chain.advance(5)  # 14:05: the upload goes on with another commit, which restarts the quiet period
    later = chain.hub.push(
        repo, {"tokenizer.json": HubFile("tokenizer.json", 10, "ab" * 32)}, at=chain.clock()
    )
    chain.advance(25)  # 14:30
    assert only(chain.poll()).detail.startswith("waiting: debounce until 14:35 UTC")
    assert chain.executions.creates() == []

    chain.advance(6)  # 14:36
    released = only(chain.poll())
    assert released.outcome == "released" and released.sha == later
    # The index names the same two shards as before: same content, same blob id, so not a change.
    assert set(released.changed) == {*shard_names(2), "tokenizer.json"}
    assert len(chain.executions.creates()) == 1


def test_commit_time_falls_back_to_the_commit_log(chain: Chain) -> None:
    repo = chain.new_repo()
    chain.hub.repos[repo].hide_last_modified = True
    chain.watch(entry(repo, debounce_minutes=30))
    chain.poll()
    chain.release(repo, "v2", minutes_ago=10)
    assert only(chain.poll()).detail.startswith("waiting: debounce until 14:20 UTC")
    assert chain.hub.paths(f"/api/models/{repo}/commits/")


def test_debounce_takes_the_commit_time_from_the_pinned_shas_own_entry(
    chain: Chain, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit log is sorted by date (huggingface_hub hf_api.py:4196) and paged with
    ``Link: rel=next`` (utils/_pagination.py:36-39): with a commit dated in the future (clock skew)
    the release is not the log's first entry, and ``lastModified`` (undocumented per revision)
    can say anything. The debounce must count from the release's own entry."""
    monkeypatch.setattr(chain.hub, "commits_page_size", 1)
    repo = chain.new_repo()
    chain.watch(entry(repo, debounce_minutes=30))
    chain.poll()
    chain.hub.push(
        repo, {"README.md": HubFile.of("README.md", "# skewed\n")}, message="card", at=T0 + timedelta(hours=1)
    )
    sha = chain.release(repo, "v2", minutes_ago=10)  # committed 13:50
    chain.hub.repos[repo].last_modified = (T0 - timedelta(hours=3)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    waiting = only(chain.poll())
    assert (waiting.outcome, waiting.sha) == ("waiting", sha)
    assert waiting.detail.startswith("waiting: debounce until 14:20 UTC")  # 13:50 + 30 min
    assert len(chain.hub.paths(f"/api/models/{repo}/commits/")) == 2  # page 1: the skewed card


@pytest.mark.timeout(30)  # without a timeout of its own the client would wait forever
def test_a_stalled_hub_makes_the_poll_fail_fast_as_unavailable(chain: Chain) -> None:
    """A Hub that accepts the connection and never answers: ``auth_check`` has no timeout in the
    client (hf_api.py:12119, session timeout=None at utils/_http.py:348); ours comes from settings."""
    chain.settings = dataclasses.replace(chain.settings, hub_timeout_seconds=1.0)
    repo = chain.new_repo()
    chain.watch(entry(repo))
    chain.poll()
    chain.release(repo, "v2")
    chain.hub.stall(f"/api/models/{repo}/auth-check")
    try:
        stalled = only(chain.poll())  # the stall lasts until released: only our timeout ends the poll
    finally:
        chain.hub.release_stalls()
    assert (stalled.outcome, stalled.reason) == ("error", "hub-unavailable")
    assert chain.executions.creates() == []
    assert only(chain.poll()).outcome == "released"  # the next tick, with the Hub back


def test_a_gated_repo_without_access_reports_the_license_fix_once_and_starts_nothing(chain: Chain) -> None:
    repo = chain.new_repo(gated=True)  # like the Hub: metadata visible, files not
    chain.watch(entry(repo))
    assert only(chain.poll()).reason == "baseline"
    sha = chain.release(repo, "v2")
    denied = only(chain.poll())
    assert (denied.outcome, denied.sha) == ("no-access", sha)
    assert "accept the license for this account" in denied.detail and f"/{repo}" in denied.detail
    assert chain.executions.creates() == [] and chain.runs() == []
    [(topic, message)] = chain.published
    assert topic == "projects/rlpipe-test/topics/rlpipe-status"
    assert message["state"] == "no-access" and message["sha"] == sha
    assert "accept the license for this account" in message["message"]
    record = chain.state(repo)["watches"][f"main@{template_hash(TEMPLATE)}"]["no_access"]
    assert record["sha"] == sha and record["notified"] is True

    assert only(chain.poll()).outcome == "no-access"
    assert len(chain.published) == 1  # told once per release, not every tick

    chain.hub.grant(repo, TOKEN)  # the account accepted the license
    released = only(chain.poll())
    assert released.outcome == "released" and len(chain.executions.creates()) == 1
    assert chain.state(repo)["watches"][f"main@{template_hash(TEMPLATE)}"]["no_access"] is None


def test_a_gated_repo_gets_a_baseline_from_its_public_metadata(chain: Chain) -> None:
    """The Hub shows a gated repo's metadata to anyone (PolicyEngine/policyengine-core#529), so
    the first poll records a baseline without access; only a release asks for the license."""
    repo = chain.new_repo(gated=True)
    chain.watch(entry(repo))
    first = only(chain.poll())
    assert (first.outcome, first.reason) == ("ignored", "baseline")
    assert first.sha == chain.hub.repos[repo].branches["main"]
    assert chain.published == [] and chain.runs() == []
    assert not chain.hub.paths(f"/api/models/{repo}/auth-check")  # a baseline needs no access


def test_rate_limits_are_waited_out_per_the_headers_then_the_poll_succeeds(chain: Chain) -> None:
    repo = chain.new_repo()
    chain.watch(entry(repo))
    chain.poll()
    chain.release(repo, "v2")
    chain.hub.rate_limit(2, reset=7, path_prefix=f"/api/models/{repo}")
    released = only(chain.poll())
    assert released.outcome == "released"
    assert chain.sleeps == [8.0, 8.0]  # the advertised reset, +1 s, twice
    assert len(chain.executions.creates()) == 1


def test_a_rate_limit_beyond_the_budget_is_reported_and_retried_next_tick(chain: Chain) -> None:
    repo = chain.new_repo()
    chain.watch(entry(repo))
    chain.poll()
    chain.release(repo, "v2")
    chain.hub.rate_limit(2, reset=100, path_prefix=f"/api/models/{repo}")
    waiting = only(chain.poll(poller=chain.poller(budget=RateLimitBudget(seconds=120, retries=3))))
    assert (waiting.outcome, waiting.reason) == ("waiting", "rate-limited")
    assert (
        "retried at the next tick" in waiting.detail
        and waiting.wait_until == (T0 + timedelta(seconds=100)).isoformat()
    )
    assert chain.sleeps == [101.0]  # a second wait would exceed the cycle's 120 s budget
    assert chain.executions.creates() == []
    assert only(chain.poll()).outcome == "released"


def test_a_bad_watch_entry_never_blocks_the_others(chain: Chain) -> None:
    good, other = chain.new_repo(), chain.new_repo()
    chain.watch(
        entry(good),
        {"hf_repo": "broken/model", "template": {"model": "gemma4-26b", "request_id": "x"}, "colour": "red"},
        entry(other),
    )
    report = chain.poll()
    bad = only(report, "broken/model")
    assert bad.outcome == "error" and bad.reason == "invalid-entry"
    assert {p.path for p in bad.problems} == {"watch[1].colour", "watch[1].template.request_id"}
    assert all(p.fix for p in bad.problems)
    assert only(report, good).reason == only(report, other).reason == "baseline"
    sha = chain.release(other, "v2")
    report = chain.poll()
    assert only(report, other).outcome == "released" and only(report, other).sha == sha
    assert only(report, "broken/model").outcome == "error" and only(report, good).reason == "unchanged"


def test_dry_run_check_reports_what_it_would_do_and_changes_nothing(chain: Chain) -> None:
    repo = chain.new_repo()
    chain.watch(entry(repo))
    chain.poll()
    sha = chain.release(repo, "v2")
    before = chain.buckets.store("state").read(state_path(repo))
    report = check(
        chain.settings, client=chain.buckets.client, token=TOKEN, clock=chain.clock, sleep=chain.sleeps.append
    )
    would = only(report)
    assert report.dry_run and would.outcome == "released" and would.sha == sha
    assert would.detail.startswith(f"would start run {would.run_id}: new release {sha[:7]}")
    assert chain.executions.creates() == [] and chain.runs() == []
    after = chain.buckets.store("state").read(state_path(repo))
    assert after.generation == before.generation
    assert only(chain.poll()).run_id == would.run_id  # the real poll starts exactly the announced run


def test_cli_upstream_check_is_a_dry_run(
    chain: Chain, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import argparse

    from rlpipe.cli.upstream import register

    repo = chain.new_repo()
    chain.watch(entry(repo))
    monkeypatch.setenv("RLPIPE_HF_TOKEN", TOKEN)
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command", required=True), settings=lambda: chain.settings)
    args = parser.parse_args(["upstream", "check", "--repo", repo, "--json"])
    assert args.func(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["dry_run"] is True
    assert [(e["repo"], e["reason"]) for e in report["entries"]] == [(repo, "baseline")]
    assert not chain.buckets.store("state").exists(state_path(repo))  # even the baseline is not written


def test_a_missing_repo_or_branch_is_an_error_for_that_entry_only(chain: Chain) -> None:
    repo = chain.new_repo()
    chain.watch(entry("nobody/nothing"), entry(repo, branch="release"), entry(repo))
    report = chain.poll()
    assert only(report, "nobody/nothing").reason == "not-found"
    by_branch = {o.branch: o for o in report.outcomes if o.repo == repo}
    assert by_branch["release"].reason == "not-found" and "no such branch" in by_branch["release"].detail
    assert by_branch["main"].reason == "baseline"


def test_a_rejected_watch_list_is_reported_not_raised(chain: Chain) -> None:
    chain.buckets.client.bucket(chain.buckets.requests).blob(WATCH_LIST).upload_from_string(b"watch: nope\n")
    [problem] = chain.poll().outcomes
    assert problem.outcome == "error" and problem.reason == "invalid-watch-list"
    assert [p.path for p in problem.problems] == ["watch"]


def test_no_watch_list_watches_nothing(chain: Chain) -> None:
    assert chain.poll().outcomes == ()
    assert model_files()  # the double's default checkpoint still has its index and shards


def test_a_commit_without_any_weights_is_not_a_release(chain: Chain) -> None:
    repo = chain.new_repo()
    chain.watch(entry(repo))
    chain.poll()
    emptied = chain.hub.push(
        repo,
        {name: None for name in [*shard_names(2), "model.safetensors.index.json"]},
        message="remove old weights",
        at=T0 - timedelta(hours=1),
    )
    waiting = only(chain.poll())
    assert (waiting.outcome, waiting.reason, waiting.sha) == ("waiting", "no-weights", emptied)
    assert chain.executions.creates() == []
    single = chain.hub.push(
        repo,
        {"model.safetensors": shard_file("model.safetensors", "v9")},
        message="single-file weights",
        at=T0 - timedelta(minutes=50),
    )
    released = only(chain.poll())  # no index: one model.safetensors is a complete checkpoint
    assert released.outcome == "released" and released.sha == single


def test_a_malformed_index_is_an_error_for_that_release_only(chain: Chain) -> None:
    repo = chain.new_repo()
    chain.watch(entry(repo))
    chain.poll()
    sha = chain.hub.push(
        repo,
        {"model.safetensors.index.json": HubFile.of("model.safetensors.index.json", "{oops")},
        at=T0 - timedelta(hours=1),
    )
    broken = only(chain.poll())
    assert (broken.outcome, broken.reason, broken.sha) == ("error", "bad-index", sha)
    assert "not valid JSON" in broken.detail and chain.executions.creates() == []


def test_function_entry_points_wire_everything_from_the_environment(
    chain: Chain, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What functions/main.py calls: ``on_tick`` (Pub/Sub tick) and ``on_webhook`` (HTTP)."""
    import base64

    from rlpipe.control import services
    from rlpipe.upstream.service import on_tick, on_webhook

    for name, value in chain.buckets.env(
        RLPIPE_WORKFLOWS_ENDPOINT=chain.executions.target, RLPIPE_HF_TOKEN=TOKEN, RLPIPE_WEBHOOK_SECRET=SECRET
    ).items():
        monkeypatch.setenv(name, value)
    services.reset()
    try:
        repo, other = chain.new_repo(), chain.new_repo()
        chain.watch(entry(repo, debounce_minutes=0), entry(other, debounce_minutes=0))
        tick = {"message": {"data": base64.b64encode(json.dumps({"repo": repo}).encode()).decode()}}
        assert [(o.repo, o.reason) for o in on_tick(tick, Logger("upstream_poll")).outcomes] == [
            (repo, "baseline")
        ]
        assert {o.repo for o in on_tick({"message": {}}, Logger("upstream_poll")).outcomes} == {repo, other}

        sha = chain.hub.push(repo, {"config.json": HubFile.of("config.json", '{"v": 2}')}, message="config")
        body = json.dumps(
            {
                "event": {"action": "update", "scope": "repo.content"},
                "repo": {"type": "model", "name": repo, "headSha": sha},
                "updatedRefs": [{"ref": "refs/heads/main", "oldSha": "0" * 40, "newSha": sha}],
            }
        ).encode()
        assert on_webhook({"X-Webhook-Secret": "nope"}, body, Logger("upstream_webhook"))[0] == 401
        status, answer = on_webhook({"X-Webhook-Secret": SECRET}, body, Logger("upstream_webhook"))
        assert status == 200 and answer["results"]["main"][0]["outcome"] == "released"
        [run] = chain.runs()
        assert run.request["hf_revision"] == sha and chain.executions.creates() == [{"run_id": run.run_id}]
    finally:
        services.reset()


def test_two_teams_watching_one_repo_with_one_template_each_get_their_own_run(chain: Chain) -> None:
    """The entry, not the template, says whose a release's run is: two teams that share a token
    Secret and a queue can watch one repo with the same template, and each gets its own run of a
    release, each entry tracking its own baseline."""
    import copy as copying

    from rlpipe.core.teams import parse_teams
    from tests.control.lifecycle.test_intake_teams import TEAMS

    declared = copying.deepcopy(TEAMS)
    for team in declared.values():
        team["read_secrets"].append("hf-shared:token")
        team["queues"].append("shared-queue")
    teams = parse_teams(declared)
    shared = {
        "model": "gemma4-26b",
        "preset": "v6e-32",
        "hf_token_secret": {"name": "hf-shared", "key": "token"},
        "tpu": {"queue": "shared-queue"},
    }
    repo = chain.new_repo()
    chain.watch(
        {"hf_repo": repo, "team": "vision", "template": copying.deepcopy(shared)},
        {"hf_repo": repo, "team": "speech", "template": copying.deepcopy(shared)},
    )
    poller = chain.poller(intake=chain.intake(teams=teams))
    assert [o.reason for o in chain.poll(poller=poller).outcomes] == ["baseline", "baseline"]
    sha = chain.release(repo, "v2")
    report = chain.poll(poller=poller)
    assert [o.outcome for o in report.outcomes] == ["released", "released"], report
    runs = chain.runs()
    assert sorted(r.team or "" for r in runs) == ["speech", "vision"], [
        (r.run_id, r.team, r.key) for r in runs
    ]
    assert all(r.lineage.hf_revision == sha for r in runs)
    assert sorted(chain.state(repo)["watches"]) == [
        f"speech:main@{template_hash(shared)}",
        f"vision:main@{template_hash(shared)}",
    ]


def _teams_chain(chain: Chain) -> Poller:
    from rlpipe.core.teams import parse_teams
    from tests.control.lifecycle.test_intake_teams import TEAMS

    return chain.poller(intake=chain.intake(teams=parse_teams(TEAMS)))


def _vision_template(secret: str = "hf-vision") -> dict[str, Any]:
    return {
        "model": "gemma4-26b",
        "preset": "v6e-32",
        "hf_token_secret": {"name": secret, "key": "token"},
        "tpu": {"queue": "user-queue"},
    }


def test_a_teams_entry_naming_another_teams_secret_is_refused_when_the_list_is_read(chain: Chain) -> None:
    repo = chain.new_repo()
    chain.watch({"hf_repo": repo, "team": "vision", "template": _vision_template("hf-speech")})
    [outcome] = chain.poll(poller=_teams_chain(chain)).outcomes
    assert (outcome.outcome, outcome.reason) == ("error", "invalid-entry")
    [problem] = [p for p in outcome.problems if p.path == "watch[0].template.hf_token_secret"]
    assert "teams.vision.read_secrets" in problem.fix and "hf-vision:token" in problem.fix
    assert chain.executions.creates() == []


def test_a_teams_entry_keeps_the_baseline_its_slot_had_before_the_team_was_part_of_it(chain: Chain) -> None:
    """State written under the slot ``branch@template`` (before an entry's team was part of its
    slot) carries over: the first poll after finds its baseline, and the release after it runs."""
    repo = chain.new_repo()
    entry = {"hf_repo": repo, "team": "vision", "template": _vision_template()}
    chain.watch(entry)
    poller = _teams_chain(chain)
    assert only(chain.poll(poller=poller)).reason == "baseline"
    watches = chain.state(repo)["watches"]
    slot = f"main@{template_hash(entry['template'])}"
    assert list(watches) == [f"vision:{slot}"]
    # The state as a deployment before this change left it: under the slot without the team.
    store = chain.buckets.store("state")
    doc = store.read(state_path(repo)).json()
    doc["watches"] = {slot: doc["watches"][f"vision:{slot}"]}
    store.put(state_path(repo), json.dumps(doc).encode(), "application/json")
    again = only(chain.poll(poller=poller))
    assert (again.outcome, again.reason) == ("ignored", "unchanged"), again
    sha = chain.release(repo, "v2")
    released = only(chain.poll(poller=poller))
    assert released.outcome == "released" and released.sha == sha
    assert chain.state(repo)["watches"][f"vision:{slot}"]["baseline"]["sha"] == sha
