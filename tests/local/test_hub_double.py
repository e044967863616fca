"""The Hub double answers like the Hub, as the real huggingface_hub 2.4.0 client sees it.

Each behaviour is checked against its source: the client's code (file:line in the 2.4.0 wheel)
or hub-docs (https://huggingface.co/docs/hub/<page>, lines at 242f4a1e). See
``rlpipe.local.hub_http`` for the full list.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rlpipe.local.hub_double import HubDouble, HubFile

T0 = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
TOKEN = "double-token"


@pytest.fixture(scope="module")
def hub() -> Iterator[HubDouble]:
    server = HubDouble().start()
    server.add_repo("org/open", at=T0)
    for hour in range(1, 6):
        server.push(
            "org/open", {"README.md": HubFile.of("README.md", f"v{hour}")}, at=T0 + timedelta(hours=hour)
        )
    server.add_repo("org/gated", gated=True, at=T0)
    server.add_repo("org/strict", gated=True, public_metadata=False, at=T0)
    yield server
    server.stop()


@pytest.fixture
def client(hub: HubDouble, monkeypatch: pytest.MonkeyPatch) -> Any:
    import huggingface_hub.constants
    from huggingface_hub import HfApi

    for name, value in hub.client_constants().items():
        monkeypatch.setattr(huggingface_hub.constants, name, value)
    return lambda token=TOKEN: HfApi(token=token)


def _status(caught: pytest.ExceptionInfo[Any]) -> int:
    return int(caught.value.response.status_code)


def _get(url: str, token: str = TOKEN, timeout: float = 5) -> Any:
    """One plain request on the client's own session (no retries), answer unchecked."""
    from huggingface_hub import get_session

    return get_session().get(url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout)


def test_a_gated_repo_shows_its_metadata_to_anyone_and_guards_its_files(client: Any) -> None:
    """Metadata public, files gated: PolicyEngine/policyengine-core#529 (anonymous model_info fine,
    /resolve 401 GatedRepo); hub-docs models-gated.md:3 ("to access the model files")."""
    from huggingface_hub import errors

    for api in (client(), client(False)):  # with a token that has no access, and anonymously
        assert api.model_info("org/gated").gated == "manual"
        assert api.list_repo_commits("org/gated")
    with tempfile.TemporaryDirectory() as cache:
        with pytest.raises(errors.GatedRepoError) as with_token:
            client().hf_hub_download("org/gated", "config.json", cache_dir=cache)
        with pytest.raises(errors.GatedRepoError) as anonymous:
            client(False).hf_hub_download("org/gated", "config.json", cache_dir=cache)
    # 403 with a token (client errors.py:350-358 example), 401 anonymously (policyengine-core#529).
    assert (_status(with_token), _status(anonymous)) == (403, 401)
    with pytest.raises(errors.GatedRepoError) as checked:
        client().auth_check("org/gated")
    assert _status(checked) == 403
    # The strict mode is NOT Hub behaviour: metadata refused too.
    with pytest.raises(errors.GatedRepoError):
        client().model_info("org/strict")


def test_bad_tokens_and_anonymous_requests_for_missing_repos_are_401(client: Any, hub: HubDouble) -> None:
    from huggingface_hub import errors

    with pytest.raises(errors.RepositoryNotFoundError) as anonymous:
        client(False).model_info("org/missing")
    assert _status(anonymous) == 401  # utils/_http.py:939-942: "401 is misleading … missing repos"
    with pytest.raises(errors.RepositoryNotFoundError) as with_token:
        client().model_info("org/missing")
    assert _status(with_token) == 404

    hub.revoke("revoked-token")
    with pytest.raises(errors.HfHubHTTPError) as bad:
        client("revoked-token").model_info("org/open")
    # A plain HfHubHTTPError, not "repo not found" (utils/_http.py:933-936; ComfyUI#9415).
    assert _status(bad) == 401 and not isinstance(bad.value, errors.RepositoryNotFoundError)
    assert bad.value.response.headers["X-Error-Message"] == "Invalid credentials in Authorization header"
    assert client().model_info("org/open").sha  # other tokens are unaffected


def test_commits_come_newest_first_in_pages_linked_by_rel_next(
    client: Any, hub: HubDouble, monkeypatch: pytest.MonkeyPatch
) -> None:
    """hf_api.py:4196 "sorted by date (last commit first)"; utils/_pagination.py:36-39 "same Link
    header format as GitHub", followed at :68-69."""
    monkeypatch.setattr(hub, "commits_page_size", 2)
    before = len(hub.paths("/api/models/org/open/commits/"))
    commits = client().list_repo_commits("org/open")
    assert [c.created_at for c in commits] == [T0 + timedelta(hours=h) for h in range(5, -1, -1)]
    assert len(hub.paths("/api/models/org/open/commits/")) - before == 3  # 6 commits, 2 per page
    first = _get(f"{hub.url}/api/models/org/open/commits/main")
    assert first.links["next"]["url"].startswith(hub.url) and len(first.json()) == 2
    everything = _get(f"{hub.url}/api/models/org/open/commits/main?limit=10")
    assert "next" not in everything.links and len(everything.json()) == 6


def test_every_answer_carries_rate_limit_headers_with_a_bucket_for_resolve(
    client: Any, hub: HubDouble
) -> None:
    """hub-docs rate-limits.md: buckets api and resolvers (lines 9-10), header format (lines 55-56),
    429 when a bucket is used up (line 38); the client reads them on every answer (utils/_http.py:971)."""
    from huggingface_hub import errors
    from huggingface_hub.utils import parse_ratelimit_headers

    token = "quota-token"  # a caller of its own: counts are per caller and window
    sha = hub.repos["org/open"].branches["main"]
    api = [_get(f"{hub.url}/api/models/org/open", token) for _ in range(2)]
    files = _get(f"{hub.url}/org/open/resolve/{sha}/config.json", token)
    first, second, resolver = (parse_ratelimit_headers(a.headers) for a in (*api, files))
    assert first is not None and second is not None and resolver is not None
    assert (first.resource_type, first.limit, first.window_seconds) == ("api", 1000, 300)
    assert second.remaining == first.remaining - 1 and 0 < second.reset_in_seconds <= 300
    assert (resolver.resource_type, resolver.remaining, resolver.limit) == ("resolvers", 4999, 5000)

    hub.set_quota(api=2)
    try:
        client(token).model_info("org/open")
        client(token).model_info("org/open")
        with pytest.raises(errors.HfHubHTTPError) as limited:
            client(token).model_info("org/open")
    finally:
        hub.set_quota(api=1000)
    info = parse_ratelimit_headers(limited.value.response.headers)
    assert _status(limited) == 429 and info is not None and info.remaining == 0
    assert "reached your 'api' rate limit" in str(limited.value)  # the client's r=0 message (:974)


@pytest.mark.timeout(30)
def test_a_stalled_route_never_answers_until_released(hub: HubDouble) -> None:
    """A silent server: the client's session has no timeout (utils/_http.py:348); only ours ends it."""
    from huggingface_hub.utils import httpx

    hub.stall("/api/models/org/open/auth-check")
    try:
        with pytest.raises(httpx.ReadTimeout):  # the stall lasts until released: only our timeout ends it
            _get(f"{hub.url}/api/models/org/open/auth-check", timeout=0.5)
        assert _get(f"{hub.url}/api/models/org/open").status_code == 200  # other routes answer
    finally:
        hub.release_stalls()
    assert _get(f"{hub.url}/api/models/org/open/auth-check").status_code == 200
