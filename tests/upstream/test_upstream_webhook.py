"""The webhook handler: authenticity, which events ask for a poll, and that it never starts runs itself."""

from __future__ import annotations

import ast
import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from rlpipe.upstream.webhook import MAX_BODY, handle_webhook, webhook_secret
from tests.harness.functions import FunctionServer
from tests.harness.patience import ceiling

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


# ---- the secret and the size come before the body -----------------------------------------------


class CountingStream:
    """A request body that has not been read, counting what the handler reads of it; ``endless``:
    it never ends (a chunked body a caller keeps sending)."""

    def __init__(self, data: bytes = b"", *, endless: bool = False) -> None:
        self.data, self.endless, self.read_bytes = data, endless, 0

    def read(self, size: int, /) -> bytes:
        if self.endless:
            chunk = b"x" * min(size, 64 * 1024)  # a network read returns what has arrived, in pieces
        else:
            chunk = self.data[self.read_bytes : self.read_bytes + min(size, 64 * 1024)]
        self.read_bytes += len(chunk)
        return chunk


@pytest.mark.parametrize(
    "headers",
    [
        {"Content-Length": str(MAX_BODY)},
        {"Content-Length": str(50 * MAX_BODY)},
        {"Transfer-Encoding": "chunked"},
        {"X-Webhook-Secret": "wrong", "Content-Length": "90"},
    ],
)
def test_a_caller_without_the_secret_costs_no_read_of_the_body(headers: dict[str, str]) -> None:
    stream, polls = CountingStream(endless=True), Polls()
    status, body = handle_webhook(headers, stream, secret=SECRET, poll_one=polls)
    assert status == 401 and "X-Webhook-Secret" in body["error"]
    assert stream.read_bytes == 0 and polls.calls == []


def test_a_declared_size_over_the_cap_is_refused_before_a_byte_is_read() -> None:
    stream = CountingStream(endless=True)
    headers = {"X-Webhook-Secret": SECRET, "Content-Length": str(MAX_BODY + 1)}
    status, body = handle_webhook(headers, stream, secret=SECRET, poll_one=Polls())
    assert status == 413 and str(MAX_BODY) in body["error"] and stream.read_bytes == 0


def test_an_endless_body_of_an_authentic_caller_is_read_only_up_to_the_cap() -> None:
    stream = CountingStream(endless=True)
    headers = {"X-Webhook-Secret": SECRET, "Transfer-Encoding": "chunked"}  # no length declared
    status, _ = handle_webhook(headers, stream, secret=SECRET, poll_one=Polls())
    assert status == 413 and stream.read_bytes == MAX_BODY + 1


def test_an_authentic_body_read_in_pieces_is_whole() -> None:
    data = payload(("refs/heads/main", "c" * 40)) + b" " * (200 * 1024)  # arrives in 64 KiB reads
    stream, polls = CountingStream(data), Polls()
    headers = {"X-Webhook-Secret": SECRET, "Content-Length": str(len(data))}
    status, body = handle_webhook(headers, stream, secret=SECRET, poll_one=polls)
    assert status == 200 and body["status"] == "polled" and polls.calls == [(REPO, "main")]
    assert stream.read_bytes == len(data)


# ---- the same through the deployed entry point: functions-framework in its own process ----------


@pytest.fixture(scope="module")
def webhook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FunctionServer]:
    env = {"RLPIPE_WEBHOOK_SECRET": SECRET, "RLPIPE_PROJECT": "rlpipe-test", "PYTHONUNBUFFERED": "1"}
    server = FunctionServer("upstream_webhook", "http", env, tmp_path_factory.mktemp("webhook")).start()
    yield server
    server.stop()


def _open(server: FunctionServer, *headers: str) -> socket.socket:
    """A POST whose head is sent and whose body is not (yet)."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=ceiling(5))
    head = ["POST / HTTP/1.1", f"Host: 127.0.0.1:{server.port}", "Content-Type: application/json", *headers]
    sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
    return sock


def _status(sock: socket.socket) -> int:
    """The answer's status code; a socket timeout (the ceiling) if the server waits for the body."""
    line = sock.makefile("rb").readline()
    assert line.startswith(b"HTTP/1.1 "), line
    return int(line.split()[1])


@pytest.mark.parametrize(
    "framing",
    [f"Content-Length: {1 << 30}", "Content-Length: 900", "Transfer-Encoding: chunked"],
)
@pytest.mark.parametrize("secret", ["wrong", None])
def test_the_function_answers_a_caller_without_the_secret_before_the_body_is_sent(
    webhook: FunctionServer, framing: str, secret: str | None
) -> None:
    """Not a byte of the body is sent: an answer can only come from a function that read none
    (today's functions/main.py read up to 1 MiB, and the framework's check before it all of it)."""
    with _open(webhook, framing, *([f"X-Webhook-Secret: {secret}"] if secret else [])) as sock:
        assert _status(sock) == 401


def test_the_function_refuses_a_declared_size_over_the_cap_before_the_body_is_sent(
    webhook: FunctionServer,
) -> None:
    with _open(webhook, f"X-Webhook-Secret: {SECRET}", f"Content-Length: {MAX_BODY + 1}") as sock:
        assert _status(sock) == 413


@pytest.mark.parametrize("secret", ["wrong", SECRET])
def test_an_endless_chunked_body_is_answered_while_it_is_still_being_sent(
    webhook: FunctionServer, secret: str
) -> None:
    """Without the secret: 401 at once; with it: 413 once the cap is read. Either way the answer
    comes while the caller is still sending, so the function never waited for the body's end."""
    stop = threading.Event()
    sent = [0]

    with _open(webhook, f"X-Webhook-Secret: {secret}", "Transfer-Encoding: chunked") as sock:

        def stream() -> None:
            chunk = b"%x\r\n%s\r\n" % (64 * 1024, b"x" * 64 * 1024)
            try:
                while not stop.is_set():
                    sock.sendall(chunk)
                    sent[0] += 64 * 1024
            except OSError:
                pass  # the server closed the connection after its answer

        sender = threading.Thread(target=stream, daemon=True)
        sender.start()
        try:
            status = _status(sock)
        finally:
            stop.set()
        assert status == (401 if secret == "wrong" else 413)
        assert sender.is_alive() or sent[0] > 0  # the body had not ended: no last chunk was ever sent
    sender.join(timeout=ceiling(1))
    assert "Traceback" not in webhook.logs()


def test_only_the_cloud_event_functions_have_their_body_read_before_they_run() -> None:
    """functions/main.py's check that reads a POST's body before the function (a JSON body that is
    no CloudEvent) runs for exactly the functions that take CloudEvents: never for the webhook,
    whose body nothing may read before it checked the secret, nor for any other HTTP function."""
    from tests.repo.test_infra import MAIN_PY, _decorated_entry_points

    tree = ast.parse(MAIN_PY.read_text())
    listed = next(
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "CLOUD_EVENT_ENTRY_POINTS" for t in node.targets)
    )
    names = {c.value for c in ast.walk(listed) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    kinds = _decorated_entry_points()
    assert names == {name for name, kind in kinds.items() if kind == "cloud_event"}
    assert "upstream_webhook" in kinds and "upstream_webhook" not in names
