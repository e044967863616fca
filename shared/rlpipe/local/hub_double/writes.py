"""How the Hub double takes uploads, route by route, as the ``huggingface_hub`` 2.4.0 client drives them.

An upload is the client's ``create_repo`` → ``create_branch`` → ``preupload_lfs_files`` → ``create_commit``
(file:line in the 2.4.0 wheel; hub-docs has no page on these endpoints):

- ``POST /api/repos/create`` (``hf_api.py:4663,4750-4786``): ``{"name", "organization", "visibility",
  "type"}``; answers ``{"url"}`` (read back by ``RepoUrl``), 409 if the repo exists (``exist_ok``
  swallows it, ``hf_api.py:4767``). A new repo has one commit, "initial commit", holding a
  ``.gitattributes`` whose LFS patterns decide upload modes (``data.GITATTRIBUTES``): Hub repos
  list that file first (huggingface_hub ``tests/test_hf_api.py``, ``test_list_repo_files``); the
  commit's exact message and the file's full pattern list are the double's rendering.
- ``POST /api/models/{repo}/branch/{branch}`` (``hf_api.py:7019-7040``): ``{"startingPoint"}``
  optional (default: main's head); 409 if it exists.
- ``POST /api/models/{repo}/preupload/{rev}`` (``_commit_api.py:749-779``): ``{"files": [{"path",
  "sample", "size"}]}`` → ``{"files": [{"path", "uploadMode", "shouldIgnore", "oid"}]}``. "lfs" for a
  path matching ``.gitattributes``, a binary sample (a NUL byte) or a size over 5 MB (the client
  counts on regular files being "<=5MB", ``_commit_api.py:303``), else "regular". ``oid`` is the
  file's at that revision (sha256 for LFS, git blob id otherwise) so the client drops unchanged
  files from the commit (``hf_api.py:5229-5237``).
- ``POST /{repo}.git/info/lfs/objects/batch`` (``lfs.py:133-215``, the git-lfs batch API): for each
  object, no ``actions`` when this repo already holds it (the client skips it, ``lfs.py:272``), else
  an ``upload`` href (a signed URL, like the Hub's S3 one: no Hub auth, no Hub rate limit) and a
  ``verify`` href. Basic transfer only: no ``chunk_size`` header, so the client sends one PUT
  (``lfs.py:290-297,351-368``).
- ``PUT /lfs-storage/{repo}/{oid}?X-Amz-Signature=…``: the bytes, streamed to disk and checked against
  the oid and size (400 otherwise, nothing kept; 403 for a bad signature, as S3).
- ``POST /{repo}.git/info/lfs/objects/verify`` (``lfs.py:300-309``): 200 when the object is stored.
- ``POST /api/models/{repo}/commit/{rev}`` (``_commit_api.py:1013-1080``): NDJSON, a ``header``
  (``summary``, ``description``, ``parentCommit``), then ``file`` (base64 content), ``lfsFile``
  (``oid``, ``size``), ``deletedFile``/``deletedFolder`` lines (``_commit_api.py:909-1002``); answers
  ``{"commitOid", "commitUrl"}``. A ``parentCommit`` that is not the branch head is 412 "A commit has
  happened since. Please refresh and try again." (huggingface_hub ``tests/test_hf_api.py``,
  ``test_create_commit_conflict``). An ``lfsFile`` whose bytes were never uploaded is refused (400).
- ``POST /api/validate-yaml`` (``hf_api.py:11679-11719``, called by ``create_commit`` for a
  README.md): the front matter must parse as a YAML mapping, else 400 with ``errors``.
- ``/api/models/{repo}/xet-write-token/…``: 501. The client uploads through Xet whenever ``hf_xet``
  is installed (``_commit_api.py:396-407``) unless ``HF_HUB_DISABLE_XET`` is set
  (``utils/_runtime.py:157-162``); the double speaks LFS only and says so.

Authorization (the double's model, messages its own unless cited): writes need a token (401
without), and a token named with ``HubDouble.read_only_token`` gets 403 — on ``repos/create`` with the Hub's
wording, "You don't have the rights to create a model under this namespace" (issue threads
huggingface/community-events#25, OpenCodeInterpreter/OpenCodeInterpreter#13). The double has no
accounts or namespaces: any write token may write anywhere.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlparse

import yaml

from rlpipe.local.hub_double.data import (
    GITATTRIBUTES,
    HubCommit,
    HubFile,
    HubRepo,
    commit_sha,
    lfs_patterns,
    matches_any,
    stamp,
)
from rlpipe.local.hub_double.routes import STORAGE, Exchange, HubState, lookup, revision_commit
from rlpipe.local.hub_double.store import BadUpload, git_blob_id

REGULAR_MAX = 5_000_000
CONFLICT = "A commit has happened since. Please refresh and try again."


def answer(hub: HubState, x: Exchange, token: str, method: str) -> bool:
    """Answer the request if it is an upload route; False if it is not one."""
    url = urlparse(x.req.path)
    parts = [unquote(p) for p in url.path.strip("/").split("/")]
    if method == "PUT" and url.path.startswith(STORAGE) and len(parts) == 4:
        _store(hub, x, f"{parts[1]}/{parts[2]}", parts[3], parse_qs(url.query or ""))
        return True
    if method != "POST":
        if len(parts) >= 5 and parts[:2] == ["api", "models"] and parts[4].startswith("xet-"):
            _no_xet(x)
            return True
        return False
    if parts == ["api", "repos", "create"]:
        _create_repo(hub, x, token)
    elif parts == ["api", "validate-yaml"]:
        _validate_yaml(x)
    elif len(parts) == 6 and parts[:2] == ["api", "models"] and parts[4] in ("branch", "preupload", "commit"):
        repo_id, what, revision = f"{parts[2]}/{parts[3]}", parts[4], parts[5]
        if _writer(hub, x, token, f"This token cannot write to {repo_id}: it has read access only"):
            {"branch": _create_branch, "preupload": _preupload, "commit": _commit}[what](
                hub, x, token, repo_id, revision
            )
    elif len(parts) >= 5 and parts[:2] == ["api", "models"] and parts[4].startswith("xet-"):
        _no_xet(x)
    elif len(parts) == 6 and parts[1].endswith(".git") and parts[2:5] == ["info", "lfs", "objects"]:
        repo_id = f"{parts[0]}/{parts[1].removesuffix('.git')}"
        if parts[5] not in ("batch", "verify"):
            return False
        if _writer(hub, x, token, f"This token cannot write to {repo_id}: it has read access only"):
            (_batch if parts[5] == "batch" else _verify)(hub, x, token, repo_id)
    else:
        return False
    return True


def _writer(hub: HubState, x: Exchange, token: str, what: str) -> bool:
    """True if the token may write; otherwise the body is drained and a refusal sent."""
    if token and token not in hub.read_only:
        return True
    x.drain()
    if not token:
        x.send(401, {"error": "You must be authenticated to write (no token was sent)."})
    else:
        x.send(403, {"error": what})
    return False


def _writable(hub: HubState, x: Exchange, token: str, repo_id: str) -> HubRepo | None:
    """The repo (``_writer`` already let the token through). Caller holds the lock."""
    return lookup(hub, x, token, repo_id, metadata=False)


def _json(x: Exchange) -> dict[str, Any] | None:
    try:
        body = json.loads(x.body() or b"{}")
    except ValueError:
        body = None
    if not isinstance(body, dict):
        x.send(400, {"error": "Malformed JSON body"})
        return None
    return body


def _create_repo(hub: HubState, x: Exchange, token: str) -> None:
    if not _writer(hub, x, token, "You don't have the rights to create a model under this namespace"):
        return
    body = _json(x)
    if body is None:
        return
    name, org = str(body.get("name") or ""), body.get("organization")
    if not name or body.get("type") not in (None, "model"):
        x.send(400, {"error": "The double creates model repos only, with a name"})
        return
    repo_id = f"{org}/{name}" if org else f"double-user/{name}"
    url = f"{hub.url}/{repo_id}"
    with hub.lock:
        if repo_id in hub.repos:
            x.send(409, {"error": "You already created this model repo", "url": url})
            return
        repo = HubRepo(repo_id, private=body.get("visibility") == "private")
        files = {".gitattributes": HubFile.of(".gitattributes", GITATTRIBUTES)}
        sha = commit_sha(repo_id, "main", "0", "initial commit")
        repo.commits[sha] = HubCommit(sha, files, "initial commit", stamp(), None)
        repo.branches["main"] = sha
        hub.repos[repo_id] = repo
    x.send(200, {"url": url, "name": repo_id, "id": hashlib.md5(repo_id.encode()).hexdigest()[:24]})


def _create_branch(hub: HubState, x: Exchange, token: str, repo_id: str, branch: str) -> None:
    body = _json(x)
    if body is None:
        return
    with hub.lock:
        repo = _writable(hub, x, token, repo_id)
        if repo is None:
            return
        if branch in repo.branches:
            x.send(409, {"error": "Reference already exists"})
            return
        start = revision_commit(x, repo, str(body.get("startingPoint") or "main"))
        if start is None:
            return
        repo.branches[branch] = start.sha
    x.send(200, {})


def _preupload(hub: HubState, x: Exchange, token: str, repo_id: str, revision: str) -> None:
    body = _json(x)
    if body is None:
        return
    with hub.lock:
        repo = _writable(hub, x, token, repo_id)
        commit = revision_commit(x, repo, revision) if repo else None
        if commit is None:
            return
        attributes = commit.files.get(".gitattributes")
        patterns = lfs_patterns(_text(hub, attributes)) if attributes else []
        answers = []
        for item in body.get("files") or []:
            path, size = str(item["path"]), int(item["size"])
            sample = base64.b64decode(item.get("sample") or "")
            lfs = matches_any(path, patterns) or b"\x00" in sample or size > REGULAR_MAX
            existing = commit.files.get(path)
            oid = None if existing is None else (existing.sha256 or existing.blob_id())
            answers.append(
                {"path": path, "uploadMode": "lfs" if lfs else "regular", "shouldIgnore": False, "oid": oid}
            )
    x.send(200, {"files": answers, "commitOid": commit.sha})


def _text(hub: HubState, item: HubFile) -> str:
    if item.blob is not None:
        return hub.store.read(item.blob).decode(errors="replace")
    return item.body().decode(errors="replace")


def _signature(hub: HubState, repo_id: str, oid: str, size: int) -> str:
    return hmac.new(hub.secret, f"{repo_id}/{oid}/{size}".encode(), hashlib.sha256).hexdigest()


def _batch(hub: HubState, x: Exchange, token: str, repo_id: str) -> None:
    body = _json(x)
    if body is None:
        return
    if body.get("operation") != "upload":
        x.send(400, {"error": "The double's LFS batch API takes uploads only"})
        return
    with hub.lock:
        repo = _writable(hub, x, token, repo_id)
        if repo is None:
            return
        objects = []
        for item in body.get("objects") or []:
            oid, size = str(item["oid"]), int(item["size"])
            entry: dict[str, Any] = {"oid": oid, "size": size}
            if repo.lfs_objects.get(oid) != size or hub.store.size(oid) != size:
                href = f"{hub.url}{STORAGE}{repo_id}/{oid}?size={size}"
                href += f"&X-Amz-Signature={_signature(hub, repo_id, oid, size)}"
                verify = f"{hub.url}/{quote(repo_id)}.git/info/lfs/objects/verify"
                entry["authenticated"] = True
                entry["actions"] = {"upload": {"href": href}, "verify": {"href": verify}}
            objects.append(entry)
    x.send(200, {"transfer": "basic", "objects": objects, "hash_algo": "sha256"})


def _store(hub: HubState, x: Exchange, repo_id: str, oid: str, query: dict[str, list[str]]) -> None:
    size = int((query.get("size") or ["-1"])[0])
    signature = (query.get("X-Amz-Signature") or [""])[0]
    if not hmac.compare_digest(signature, _signature(hub, repo_id, oid, size)):
        x.drain()
        x.send(403, {"error": "SignatureDoesNotMatch"})
        return
    try:
        hub.store.put_stream(x.chunks(), sha256=oid, size=size)
    except BadUpload as exc:
        x.drain()
        x.send(400, {"error": f"BadDigest: {exc}"})
        return
    with hub.lock:
        repo = hub.repos.get(repo_id)
        if repo is not None:
            repo.lfs_objects[oid] = size
    x.send_bytes(200, b"", "text/plain", {"ETag": f'"{oid[:32]}"'})


def _verify(hub: HubState, x: Exchange, token: str, repo_id: str) -> None:
    body = _json(x)
    if body is None:
        return
    with hub.lock:
        repo = _writable(hub, x, token, repo_id)
        if repo is None:
            return
        oid, size = str(body.get("oid")), body.get("size")
        stored = repo.lfs_objects.get(oid) == size and hub.store.size(oid) == size
    if stored:
        x.send(200, {"success": True})
    else:
        x.send(404, {"error": f"LFS object {oid} of {size} bytes was not uploaded"})


def _lines(chunks: Iterator[bytes]) -> Iterator[dict[str, Any]]:
    pending = bytearray()
    for data in chunks:
        pending += data
        while (end := pending.find(b"\n")) >= 0:
            line, pending = bytes(pending[:end]), pending[end + 1 :]
            if line.strip():
                yield json.loads(line)
    if bytes(pending).strip():
        yield json.loads(bytes(pending))


def _commit(hub: HubState, x: Exchange, token: str, repo_id: str, branch: str) -> None:
    header: dict[str, Any] = {}
    changes: dict[str, HubFile | None] = {}
    folders: list[str] = []
    lfs: dict[str, tuple[str, int | None]] = {}
    try:
        for line in _lines(x.chunks()):
            key, value = line.get("key"), line.get("value") or {}
            if key == "header":
                header = value
            elif key == "file":  # a regular file: its bytes go to disk now, before the lock
                data = base64.b64decode(value["content"])
                changes[value["path"]] = HubFile(
                    value["path"], len(data), blob=hub.store.put_bytes(data), oid=git_blob_id(data)
                )
            elif key == "lfsFile":
                lfs[value["path"]] = (value["oid"], value.get("size"))
            elif key == "deletedFile":
                changes[value["path"]] = None
            elif key == "deletedFolder":
                folders.append(value["path"].rstrip("/") + "/")
    except (ValueError, KeyError, TypeError) as exc:
        x.send(400, {"error": f"Malformed commit payload: {exc}"})
        return
    with hub.lock:
        repo = _writable(hub, x, token, repo_id)
        if repo is None:
            return
        head = repo.branches.get(branch)
        if head is None:
            x.send(404, {"error": f"Invalid rev id: {branch}"}, error_code="RevisionNotFound")
            return
        parent = header.get("parentCommit")
        if parent and not head.startswith(parent):
            x.send(412, {"error": CONFLICT})
            return
        for path, (oid, size) in lfs.items():
            stored = repo.lfs_objects.get(oid)
            if stored is None or (size is not None and stored != size):
                x.send(400, {"error": f"LFS object for {path} ({oid}) was never uploaded"})
                return
            changes[path] = HubFile(path, stored, oid, blob=oid)
        files = {k: v for k, v in repo.commits[head].files.items() if not k.startswith(tuple(folders))}
        for path, item in changes.items():
            if item is None:
                files.pop(path, None)
            else:
                files[path] = item
        summary = str(header.get("summary") or "")
        message = summary + (f"\n\n{header['description']}" if header.get("description") else "")
        sha = commit_sha(repo_id, branch, str(len(repo.commits)), message)
        repo.commits[sha] = HubCommit(sha, files, message, stamp(), head)
        repo.branches[branch] = sha
    x.send(200, {"success": True, "commitOid": sha, "commitUrl": f"{hub.url}/{repo_id}/commit/{sha}"})


def _validate_yaml(x: Exchange) -> None:
    body = _json(x)
    if body is None:
        return
    content = str(body.get("content") or "")
    errors = []
    if content.startswith("---"):
        end = content.find("\n---", 3)
        try:
            meta = yaml.safe_load(content[3:end] if end >= 0 else "")
            if end < 0 or not isinstance(meta, dict | None):
                errors.append({"message": "the metadata block must be a YAML mapping closed by ---"})
        except yaml.YAMLError as exc:
            errors.append({"message": f"invalid YAML: {exc}"})
    if errors:
        x.send(400, {"error": "Invalid metadata in README.md", "errors": errors, "warnings": []})
    else:
        x.send(200, {"errors": [], "warnings": []})


def _no_xet(x: Exchange) -> None:
    x.drain()
    x.send(501, {"error": "The rlpipe Hub double speaks the LFS protocol only: set HF_HUB_DISABLE_XET=1"})
