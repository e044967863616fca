"""The webhook handler: authenticity, which events ask for a poll, and that it never starts runs itself."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rlpipe.upstream.webhook import handle_webhook, webhook_secret

SECRET = "s3cret-value"
REPO = "google/gemma-4-26b-a4b-it"


def payload(*refs: tuple[str, str | None], scope: str = "repo.content", repo_type: str = "model") -> bytes:
    return json.dumps(
        {
            "event": {"action": "update", "scope": scope},
            "repo": {"type": repo_type, "name": REPO, "id": "65f0", "private": False, "headSha": "a" * 40},
            "updatedRefs": [{"ref": ref, "oldSha": "b" * 40, "newSha": new} for ref, new in refs],
            "webhook": {"id": "w1", "version": 3},
        }
    ).encode()


class Polls:
    def __init__(self, answer: Any = None):
        self.calls: list[tuple[str, str]] = []
        self.answer = answer if answer is not None else [{"outcome": "released"}]

    def __call__(self, repo: str, branch: str) -> Any:
        self.calls.append((repo, branch))
        return self.answer


def test_a_push_to_main_polls_that_repo_and_branch_only() -> None:
    polls = Polls()
    status, body = handle_webhook(
        {"X-Webhook-Secret": SECRET}, payload(("refs/heads/main", "c" * 40)), secret=SECRET, poll_one=polls
    )
    assert status == 200 and body["status"] == "polled"
    assert polls.calls == [(REPO, "main")]
    assert body["results"] == {"main": [{"outcome": "released"}]}


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"X-Webhook-Secret": "wrong"},
        {"X-Webhook-Secret": SECRET + " "},
        {"X-Webhook-Secret": SECRET[:-1]},
    ],
)
def test_a_bad_or_missing_secret_is_401_and_polls_nothing(headers: dict[str, str]) -> None:
    polls = Polls()
    status, body = handle_webhook(
        headers, payload(("refs/heads/main", "c" * 40)), secret=SECRET, poll_one=polls
    )
    assert status == 401 and "X-Webhook-Secret" in body["error"]
    assert polls.calls == []


def test_header_name_is_case_insensitive() -> None:
    polls = Polls()
    status, _ = handle_webhook(
        {"x-webhook-secret": SECRET}, payload(("refs/heads/main", "c" * 40)), secret=SECRET, poll_one=polls
    )
    assert status == 200 and polls.calls == [(REPO, "main")]


def test_no_configured_secret_refuses_everything() -> None:
    polls = Polls()
    status, body = handle_webhook(
        {"X-Webhook-Secret": ""}, payload(("refs/heads/main", "c" * 40)), secret=None, poll_one=polls
    )
    assert status == 503 and "RLPIPE_WEBHOOK_SECRET" in body["error"] and polls.calls == []


@pytest.mark.parametrize(
    "data, reason",
    [
        (payload(("refs/pr/7", "c" * 40)), "no branch head moved"),
        (payload(("refs/tags/v1", "c" * 40)), "no branch head moved"),
        (payload(("refs/heads/main", None)), "no branch head moved"),  # branch deleted
        (payload(("refs/heads/main", "c" * 40), scope="discussion"), "not repo.content"),
        (payload(("refs/heads/main", "c" * 40), repo_type="dataset"), "not watched"),
    ],
)
def test_events_that_are_not_a_branch_push_are_acknowledged_and_ignored(data: bytes, reason: str) -> None:
    polls = Polls()
    status, body = handle_webhook({"X-Webhook-Secret": SECRET}, data, secret=SECRET, poll_one=polls)
    assert status == 200 and body["status"] == "ignored" and reason in body["reason"]
    assert polls.calls == []


def test_a_branch_nobody_watches_is_reported_ignored() -> None:
    status, body = handle_webhook(
        {"X-Webhook-Secret": SECRET},
        payload(("refs/heads/dev", "c" * 40)),
        secret=SECRET,
        poll_one=Polls(answer=[]),
    )
    assert status == 200 and body["status"] == "ignored" and "not in the watch list" in body["reason"]


def test_malformed_bodies_are_400() -> None:
    for body in (
        b"{not json",
        b"[1, 2]",
        json.dumps({"event": {"scope": "repo.content"}, "repo": {}}).encode(),
    ):
        status, _ = handle_webhook({"X-Webhook-Secret": SECRET}, body, secret=SECRET, poll_one=Polls())
        assert status == 400, body


def test_a_failing_poll_still_answers_2xx() -> None:
    def boom(repo: str, branch: str) -> Any:
        raise RuntimeError("GCS down")

    status, body = handle_webhook(
        {"X-Webhook-Secret": SECRET}, payload(("refs/heads/main", "c" * 40)), secret=SECRET, poll_one=boom
    )
    assert status == 200 and "GCS down" in body["results"]["main"]["error"]


def test_secret_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RLPIPE_WEBHOOK_SECRET", raising=False)
    assert webhook_secret() is None
    monkeypatch.setenv("RLPIPE_WEBHOOK_SECRET", " from-secret-manager\n")
    assert webhook_secret() == "from-secret-manager"


def test_narrower_content_scopes_poll_and_pull_requests_stay_ignored() -> None:
    """hub-docs webhooks.md:102-104: "More scopes can be added in the future", and an action on a
    narrowed scope counts as an update on the broader one; webhooks.md:97: ``repo.content`` "triggers
    on new Pull Requests as well due to the newly created reference/commit"."""
    for scope in ("repo.content", "repo.content.lfs", "repo.content.tags.new"):
        polls = Polls()
        status, body = handle_webhook(
            {"X-Webhook-Secret": SECRET},
            payload(("refs/heads/main", "c" * 40), scope=scope),
            secret=SECRET,
            poll_one=polls,
        )
        assert (status, body["status"], polls.calls) == (200, "polled", [(REPO, "main")]), scope
    for scope in ("repo.contents", "repo.config", "repo.config.dois", "repo"):
        polls = Polls()
        status, body = handle_webhook(
            {"X-Webhook-Secret": SECRET},
            payload(("refs/heads/main", "c" * 40), scope=scope),
            secret=SECRET,
            poll_one=polls,
        )
        assert (status, body["status"], polls.calls) == (200, "ignored", []), scope
    # Opening a pull request: repo.content with a newly created refs/pr/N (oldSha null).
    polls = Polls()
    opened = json.loads(payload(("refs/pr/3", "d" * 40)))
    opened["updatedRefs"][0]["oldSha"] = None
    status, body = handle_webhook({"X-Webhook-Secret": SECRET}, opened, secret=SECRET, poll_one=polls)
    assert (status, body["status"], polls.calls) == (200, "ignored", [])
    assert "pull-request refs" in body["reason"]
