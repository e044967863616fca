"""The one best-effort sender of status messages (rlpipe.control.adapters.notify.Notifier): the stage
service, intake, reconcile's repairs and the upstream poller all send through it.

A message is only a message: a publish that fails is logged, naming what was not sent, and never
raised (the run's end, intake's answer, a repair or a poll stands); a deployment without a topic
or without a publisher sends nothing.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from rlpipe.control.adapters.logs import Logger
from rlpipe.control.adapters.notify import Notice, Notifier, status_message
from rlpipe.control.adapters.settings import Settings
from rlpipe.core.runs.record import Failure, RunRecord, Source
from tests.harness.mutants import mutant


def _record(notify: str | None = None) -> RunRecord:
    request: dict[str, Any] = {"model": "gemma4-26b", **({"notify": notify} if notify else {})}
    return RunRecord(
        run_id="rnotify00001",
        key="k",
        source=Source(kind="cli"),
        request=request,
        state="failed",
        failure=Failure(
            tag="permanent", message="exit code 1", stage="train", attempt=1, rule="workload-failed"
        ),
    )


class Sent:
    def __init__(self, error: Exception | None = None) -> None:
        self.error, self.messages = error, []  # type: Exception | None, list[tuple[str, dict[str, Any]]]

    def __call__(self, topic: str, message: dict[str, Any]) -> str:
        if self.error is not None:
            raise self.error
        self.messages.append((topic, message))
        return "message-id"


def _logged(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


SETTINGS = Settings(project="my-project", status_topic="rlpipe-status")


@pytest.mark.parametrize(
    ("notify", "topic"),
    [
        (None, "projects/my-project/topics/rlpipe-status"),  # the deployment's
        ("team-status", "projects/my-project/topics/team-status"),  # the request's own
        ("projects/other/topics/theirs", "projects/other/topics/theirs"),
    ],
)
def test_a_runs_status_message_goes_to_its_requests_topic_else_the_deployments(
    notify: str | None, topic: str
) -> None:
    sent = Sent()
    record = _record(notify)
    assert Notifier(SETTINGS, sent, Logger("test")).send(record) is True
    assert sent.messages == [(topic, status_message(record))]
    # A group's message goes where its member's did (stage finish): the topic given wins.
    assert Notifier(SETTINGS, sent, Logger("test")).send(record, topic="group-topic")
    assert sent.messages[-1][0] == "projects/my-project/topics/group-topic"


def test_a_failed_publish_is_logged_naming_what_was_not_sent_and_never_raised() -> None:
    stream = io.StringIO()
    notifier = Notifier(SETTINGS, Sent(ConnectionError("pubsub unreachable")), Logger("test", stream))
    assert notifier.send(_record()) is False
    notice = Notice("the no-access message", {"state": "no-access"}, "team-status", {"repo": "google/gated"})
    assert notifier.send(notice) is False
    status, no_access = _logged(stream)
    assert (status["severity"], status["message"], status["run_id"]) == (
        "WARNING",
        "could not publish the status message",
        "rnotify00001",
    )
    assert "pubsub unreachable" in status["error"]
    assert (no_access["message"], no_access["repo"]) == (
        "could not publish the no-access message",
        "google/gated",
    )
    assert "pubsub unreachable" in no_access["error"]


def test_nothing_is_sent_without_a_topic_or_a_publisher() -> None:
    sent = Sent()
    assert (
        Notifier(Settings(project="my-project", status_topic=""), sent, Logger("test")).send(_record())
        is False
    )
    assert sent.messages == []
    assert Notifier(SETTINGS, None, Logger("test")).send(_record()) is False


def test_a_notice_goes_to_its_own_topic_else_the_deployments() -> None:
    sent = Sent()
    notifier = Notifier(SETTINGS, sent, Logger("test"))
    assert notifier.send(Notice("the no-access message", {"state": "no-access"}, "team-status"))
    assert notifier.send(Notice("the no-access message", {"state": "no-access"}))
    assert [topic for topic, _ in sent.messages] == [
        "projects/my-project/topics/team-status",
        "projects/my-project/topics/rlpipe-status",
    ]
    assert sent.messages[0][1] == {"state": "no-access"}


def team_problems(status_message: Any) -> list[str]:
    """What a status message (``status_message`` of a module) says wrong about whose run it is."""
    problems = []
    for team, expected in (("vision", "vision"), (None, "default")):
        record = _record()
        record.source = Source(kind="gcs", team=team)
        said = status_message(record).get("team")
        if said != expected:
            problems.append(f"a run of team {team or '(none)'} is announced as team {said!r}")
    return problems


def test_a_status_message_names_the_runs_team() -> None:
    assert team_problems(status_message) == []


def test_a_status_message_without_the_team_is_reported(tmp_path: Path) -> None:
    from rlpipe.control.adapters import notify

    with mutant(notify, '        "team": record.team,\n', "", tmp_path) as careless:
        problems = team_problems(careless.status_message)
    assert any("announced as team None" in p for p in problems), problems
