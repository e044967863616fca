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

from rlpipe.local.hub import HubDouble, HubFile, model_files
from rlpipe.upstream.hub import HubReader, NoAccess, NotFound, RateLimitBudget, RateLimited

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
    server.add_repo("org/gated", gated=True, public_metadata=True, at=T0)
    server.add_repo("org/hidden", gated=True, at=T0)
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
    assert api.model_info("org/gated").sha  # metadata is public, like the Hub
    with pytest.raises(errors.GatedRepoError):
        api.model_info("org/hidden")  # the stricter mode older tests rely on


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
    with pytest.raises(NoAccess):
        reader.head("org/hidden", "main")
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
