"""The Hub double's listings of a revision: the file tree, paths-info and the refs.

Each answer has the shape the ``huggingface_hub`` 2.4.0 client reads (file:line in its wheel), for
model repos and, under ``/api/datasets/``, dataset repos alike (the client builds both URLs from
``repo_type``, e.g. ``hf_api.py:4023``):

- ``GET /api/models/{repo}/tree/{rev}[/{path}]`` (``list_repo_tree``, ``hf_api.py:4023``): entries
  ``{"type": "file"|"directory", "oid", "size", "path"[, "lfs"]}`` read by ``RepoFile``/``RepoFolder``
  (``hf_api.py:711-719``), directories included, paged by a ``Link`` cursor at 1000 entries ("capped
  by the Hub (1000 entries per page…)", ``hf_api.py:4013``).
- ``POST /api/models/{repo}/paths-info/{rev}`` (``get_paths_info``, ``hf_api.py:4331-4337``): a form
  with ``paths`` repeated; answers the entries that exist, in the same shape, and omits the others.
- ``GET /api/models/{repo}/refs`` (``list_repo_refs``, ``hf_api.py:4163-4180``): branches, tags and
  converts; ``create_branch(exist_ok=True)`` reads it after a 403 (``hf_api.py:7031-7040``).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

from rlpipe.local.hub_double.data import HubCommit, HubFile, commit_sha
from rlpipe.local.hub_double.routes import Exchange, HubState, api_repo, bounded_int, lookup, revision_commit

TREE_PAGE = 1000


def answer(hub: HubState, x: Exchange, token: str, method: str) -> bool:
    """Answer the request if it is a listing; False if it is not one of these routes."""
    url = urlparse(x.req.path)
    parts = [unquote(p) for p in url.path.strip("/").split("/")]
    found = api_repo(parts)
    if found is None or not found[1]:
        return False
    repo_id, rest = found  # the repo's key: datasets are listed under /api/datasets/ alike
    if method == "GET" and rest[0] == "tree" and len(rest) >= 2:
        _tree(hub, x, token, repo_id, rest[1], "/".join(rest[2:]), parse_qs(url.query or ""))
    elif method == "GET" and rest == ["refs"]:
        _refs(hub, x, token, repo_id)
    elif method == "POST" and rest[0] == "paths-info" and len(rest) == 2:
        form = parse_qs(x.body().decode())
        _paths_info(hub, x, token, repo_id, rest[1], form.get("paths", []))
    else:
        return False
    return True


def _entry(item: HubFile) -> dict[str, Any]:
    """A file as ``list_repo_tree``/``get_paths_info`` report it (``RepoFile``, ``hf_api.py:711-719``)."""
    out: dict[str, Any] = {"type": "file", "oid": item.blob_id(), "size": item.size, "path": item.name}
    if item.sha256:
        out["lfs"] = {"oid": item.sha256, "size": item.size, "pointerSize": 134}
    return out


def _folder(commit: HubCommit, path: str) -> dict[str, Any]:
    return {"type": "directory", "oid": commit_sha(commit.sha, path), "size": 0, "path": path}


def _folders(commit: HubCommit) -> set[str]:
    names: set[str] = set()
    for name in commit.files:
        parts = name.split("/")[:-1]
        names.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    return names


def _tree(
    hub: HubState,
    x: Exchange,
    token: str,
    repo_id: str,
    revision: str,
    path: str,
    query: dict[str, list[str]],
) -> None:
    recursive = (query.get("recursive") or ["false"])[0].lower() in ("1", "true")
    with hub.lock:
        repo = lookup(hub, x, token, repo_id, metadata=True)
        commit = revision_commit(x, repo, revision) if repo else None
        if repo is None or commit is None:
            return
        folders = _folders(commit)
        base = path.strip("/")
        if base and base not in folders:
            x.send(404, {"error": f"Entry not found: {base}"}, error_code="EntryNotFound")
            return
        prefix = base + "/" if base else ""

        def listed(name: str) -> bool:
            return name.startswith(prefix) and (recursive or "/" not in name[len(prefix) :])

        entries = [_folder(commit, d) for d in sorted(folders) if listed(d)]
        entries += [_entry(f) for name, f in sorted(commit.files.items()) if listed(name)]
    start = bounded_int(query.get("cursor"), 0, 0, len(entries))
    headers = {}
    if start + TREE_PAGE < len(entries):
        nxt = dict(recursive=str(recursive).lower(), cursor=str(start + TREE_PAGE))
        link = f"{hub.url}{urlparse(x.req.path).path}?" + "&".join(f"{k}={v}" for k, v in nxt.items())
        headers["Link"] = f'<{link}>; rel="next"'
    x.send(200, entries[start : start + TREE_PAGE], headers=headers)


def _paths_info(
    hub: HubState, x: Exchange, token: str, repo_id: str, revision: str, paths: list[str]
) -> None:
    with hub.lock:
        repo = lookup(hub, x, token, repo_id, metadata=True)
        commit = revision_commit(x, repo, revision) if repo else None
        if repo is None or commit is None:
            return
        folders = _folders(commit)
        found = []
        for path in (p.strip("/") for p in paths):
            if path in commit.files:
                found.append(_entry(commit.files[path]))
            elif path in folders:
                found.append(_folder(commit, path))
    x.send(200, found)


def _refs(hub: HubState, x: Exchange, token: str, repo_id: str) -> None:
    with hub.lock:
        repo = lookup(hub, x, token, repo_id, metadata=True)
        if repo is None:
            return
        branches = [
            {"name": name, "ref": f"refs/heads/{name}", "targetCommit": sha}
            for name, sha in sorted(repo.branches.items())
        ]
    x.send(200, {"branches": branches, "converts": [], "tags": []})
