"""The Hub double's routes as the real huggingface_hub client sees them, and HubReader's
classification of the client's errors (GatedRepoError before RepositoryNotFoundError)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from rlpipe.local.hub_double import HubDouble, HubFile, model_files
from rlpipe.upstream.hub_calls import HubReader, NoAccess, NotFound, RateLimitBudget, RateLimited, Unavailable

T0 = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
TOKEN = "reader-token"


@pytest.fixture(scope="module")
def hub() -> Iterator[HubDouble]:
    server = HubDouble().start()
    server.add_repo("org/open", at=T0)
    server.push(
        "org/open",
        {"README.md": HubFile.of("README.md", "# card\n")},
        message="card",
        at=T0 + timedelta(hours=1),
    )
    server.add_repo("org/gated", gated=True, at=T0)  # like the Hub: metadata public, files gated
    yield server
    server.stop()


@pytest.fixture
def api(hub: HubDouble, monkeypatch: pytest.MonkeyPatch) -> Any:
    import huggingface_hub.constants
    from huggingface_hub import HfApi

    for name, value in hub.client_constants().items():
        monkeypatch.setattr(huggingface_hub.constants, name, value)
    return HfApi(token=TOKEN)


def test_model_info_with_files_metadata(api: Any, hub: HubDouble) -> None:
    info = api.model_info("org/open", revision="main", files_metadata=True)
    assert info.sha == hub.repos["org/open"].branches["main"] and info.last_modified == T0 + timedelta(
        hours=1
    )
    siblings = {s.rfilename: s for s in info.siblings}
    shard = siblings["model-00001-of-00002.safetensors"]
    assert shard.lfs is not None and len(shard.lfs.sha256) == 64
    readme = siblings["README.md"]
    assert readme.lfs is None and readme.blob_id == HubFile.of("README.md", "# card\n").blob_id()


def test_list_repo_commits_newest_first_with_dates(api: Any, hub: HubDouble) -> None:
    commits = api.list_repo_commits("org/open")
    assert [c.title for c in commits] == ["card", "initial commit"]
    assert [c.created_at for c in commits] == [T0 + timedelta(hours=1), T0]
    older = api.list_repo_commits("org/open", revision=commits[1].commit_id)
    assert [c.commit_id for c in older] == [commits[1].commit_id]


def test_auth_check_and_gating(api: Any, hub: HubDouble) -> None:
    from huggingface_hub import errors

    api.auth_check("org/open")
    with pytest.raises(errors.GatedRepoError):
        api.auth_check("org/gated")
    with pytest.raises(errors.RepositoryNotFoundError) as missing:
        api.auth_check("org/missing")
    assert not isinstance(missing.value, errors.GatedRepoError)
    # A gated repo's metadata and commit log are public, like the Hub's; only its files are not
    # (PolicyEngine/policyengine-core#529; hub-docs models-gated.md:3 "to access the model files").
    assert api.model_info("org/gated").sha
    assert api.list_repo_commits("org/gated")
    with tempfile.TemporaryDirectory() as cache, pytest.raises(errors.GatedRepoError):
        api.hf_hub_download("org/gated", "config.json", cache_dir=cache)


def test_resolve_serves_the_index_at_a_revision(api: Any, hub: HubDouble) -> None:
    sha = hub.repos["org/open"].branches["main"]
    with tempfile.TemporaryDirectory() as cache:
        path = api.hf_hub_download("org/open", "model.safetensors.index.json", revision=sha, cache_dir=cache)
        index = json.loads(Path(path).read_text())
    assert sorted(set(index["weight_map"].values())) == sorted(
        n for n in model_files() if n.startswith("model-0")
    )
    assert hub.paths("/org/open/resolve/")  # the HEAD and the GET reached the double


def test_rate_limit_headers_are_the_ones_the_client_parses(api: Any, hub: HubDouble) -> None:
    from huggingface_hub import errors
    from huggingface_hub.utils import parse_ratelimit_headers

    hub.rate_limit(1, reset=42, limit=500, window=300, path_prefix="/api/models/org/open")
    with pytest.raises(errors.HfHubHTTPError) as caught:
        api.model_info("org/open")
    info = parse_ratelimit_headers(caught.value.response.headers)
    assert caught.value.response.status_code == 429
    assert (info.remaining, info.reset_in_seconds, info.limit, info.window_seconds) == (0, 42, 500, 300)
    assert api.model_info("org/open").sha  # only the next request was limited


def test_reader_classifies_gated_before_not_found(api: Any) -> None:
    reader = HubReader(token=TOKEN, sleep=lambda s: None)
    with pytest.raises(NoAccess):
        reader.check_access("org/gated")
    gated = reader.head("org/gated", "main")  # public metadata: a baseline needs no access
    with pytest.raises(NoAccess):
        reader.read_index("org/gated", gated.sha)  # the files are what the license guards
    with pytest.raises(NotFound, match="does not exist"):
        reader.check_access("org/missing")
    with pytest.raises(NotFound, match="no such branch"):
        reader.head("org/open", "nope")


def test_reader_backs_off_within_its_budget(api: Any, hub: HubDouble) -> None:
    sleeps: list[float] = []
    reader = HubReader(
        token=TOKEN, sleep=sleeps.append, clock=lambda: T0, budget=RateLimitBudget(seconds=30, retries=2)
    )
    hub.rate_limit(1, reset=9, path_prefix="/api/models/org/open")
    assert reader.head("org/open", "main").sha
    hub.rate_limit(3, reset=5, path_prefix="/api/models/org/open")
    with pytest.raises(RateLimited) as caught:
        reader.head("org/open", "main")  # one more retry would exceed `retries`
    assert sleeps == [10.0, 6.0, 6.0] and caught.value.until == T0 + timedelta(seconds=5)
    assert reader.head("org/open", "main").sha  # all three 429s were consumed: nothing left over


# ---- every Hub call is one request: the budget sees every 429, the timeout bounds every wait -----
# huggingface_hub 2.4.0 retries list_repo_commits pages (utils/_pagination.py:41,50 → http_backoff,
# utils/_http.py:466,473) and repeats hf_hub_download's HEAD with retries on an empty cache
# (file_download.py:1170-1188), sleeping reset + 1 s itself (utils/_http.py:527-535,560).


def _reader(sleeps: list[float], seconds: float, retries: int, timeout: float = 10.0) -> HubReader:
    return HubReader(
        token=TOKEN,
        sleep=sleeps.append,
        clock=lambda: T0,
        budget=RateLimitBudget(seconds=seconds, retries=retries),
        timeout=timeout,
    )


def test_a_429_on_the_commit_log_is_waited_by_our_budget_not_by_the_client(api: Any, hub: HubDouble) -> None:
    sha = hub.repos["org/open"].branches["main"]
    prefix = "/api/models/org/open/commits/"
    sleeps: list[float] = []
    before = len(hub.paths(prefix))
    hub.rate_limit(1, reset=3, path_prefix=prefix)  # the client would sleep 4 s and try again
    with pytest.raises(RateLimited):
        _reader(sleeps, seconds=0, retries=0).commit_time("org/open", sha)  # the webhook's budget
    assert sleeps == []
    assert len(hub.paths(prefix)) - before == 1  # no second request: nobody slept and retried

    hub.rate_limit(1, reset=3, path_prefix=prefix)
    assert _reader(sleeps, seconds=30, retries=3).commit_time("org/open", sha) == T0 + timedelta(hours=1)
    assert sleeps == [4.0] and len(hub.paths(prefix)) - before == 3  # our wait, then our retry


def test_a_429_on_resolve_is_waited_by_our_budget_not_by_the_client(api: Any, hub: HubDouble) -> None:
    sha = hub.repos["org/open"].branches["main"]
    prefix = f"/org/open/resolve/{sha}/"
    sleeps: list[float] = []
    before = len(hub.paths(prefix))
    hub.rate_limit(2, reset=3, path_prefix=prefix)
    with pytest.raises(RateLimited):
        _reader(sleeps, seconds=0, retries=0).read_index("org/open", sha)
    assert sleeps == []
    assert len(hub.paths(prefix)) - before == 1  # no second request behind our back

    index = _reader(sleeps, seconds=30, retries=3).read_index("org/open", sha)  # one 429 left
    assert index["weight_map"] and sleeps == [4.0] and len(hub.paths(prefix)) - before == 3


def test_a_429_that_is_not_about_the_rate_limit_waits_for_retry_after(api: Any, hub: HubDouble) -> None:
    """RateLimit is on every answer; it is the reason for a 429 only with r=0 (utils/_http.py:529-534,
    :969-972). Here 7 requests are left, so Retry-After (2 s) is the wait, not the reset (200 s)."""
    sleeps: list[float] = []
    hub.rate_limit(1, reset=200, remaining=7, retry_after=2, path_prefix="/api/models/org/open")
    assert _reader(sleeps, seconds=120, retries=3).head("org/open", "main").sha
    assert sleeps == [3.0]

    from rlpipe.upstream.hub_calls import retry_after

    assert retry_after("Wed, 02 Dec 2026 12:00:30 GMT", now=T0) == 30  # RFC 9110 HTTP-date form
    assert retry_after("soon") is None


def test_paged_commits_pick_the_pinned_sha(api: Any, hub: HubDouble, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sorted by date, newest first (hf_api.py:4196), so a commit dated later than its child (clock
    skew) comes first; pages follow ``Link: rel=next`` (utils/_pagination.py:36-39,68-69)."""
    monkeypatch.setattr(hub, "commits_page_size", 1)
    hub.add_repo("org/skewed", at=T0)
    hub.push("org/skewed", {"README.md": HubFile.of("README.md", "# a\n")}, at=T0 + timedelta(hours=2))
    sha = hub.push("org/skewed", {"config.json": HubFile.of("config.json", "{}")}, at=T0 + timedelta(hours=1))
    prefix = "/api/models/org/skewed/commits/"
    assert [c.commit_id for c in api.list_repo_commits("org/skewed", revision=sha)][1] == sha
    before = len(hub.paths(prefix))
    assert _reader([], seconds=0, retries=0).commit_time("org/skewed", sha) == T0 + timedelta(hours=1)
    assert len(hub.paths(prefix)) - before == 2  # the second page had it; the third was never read


@pytest.mark.timeout(30)  # auth_check has no timeout in the client (hf_api.py:12119): it would hang
def test_a_stalled_or_unreachable_hub_fails_the_reader_fast_as_unavailable(
    api: Any, hub: HubDouble, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    import huggingface_hub.constants

    sha = hub.repos["org/open"].branches["main"]
    reader = _reader([], seconds=0, retries=0, timeout=0.5)
    calls = {
        "/api/models/org/open/auth-check": lambda: reader.check_access("org/open"),
        "/api/models/org/open/commits/": lambda: reader.commit_time("org/open", sha),
        "/org/open/resolve/": lambda: reader.read_index("org/open", sha),
        "/api/models/org/open/revision/": lambda: reader.head("org/open", "main"),
    }
    for prefix, call in calls.items():
        hub.stall(prefix)  # until released: returning at all proves our timeout ended the call
        try:
            with pytest.raises(Unavailable, match="could not reach"):
                call()
        finally:
            hub.release_stalls()
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", f"http://127.0.0.1:{port}")  # refused
    with pytest.raises(Unavailable, match="could not reach"):
        _reader([], seconds=0, retries=0, timeout=0.5).check_access("org/open")
