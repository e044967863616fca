# rlpipe-publisher: shipped in the publish Job as `python3 -c <this file>` (see the docstring)
"""rlpipe publish: one run's Hugging Face export, from GCS to a Hub repo branch, in ONE commit.

The publish Job runs this file as ``python3 -c <its source> --source gs://… …``, with the text of
``exported.py`` in place of its one rlpipe import (``rlpipe.publisher.shipped_program``), so it
imports only the standard library, ``huggingface_hub`` and ``google.cloud.storage``. The write
token comes from env ``HF_TOKEN`` only (never an argument), and no output carries it: every line
is redacted (``hf_…`` tokens, signed-URL signatures).

What it does, in order:

0. Reads the export manifest (``--manifest``, written last by the export Job) and lists
   ``--source``: it pushes exactly the files the manifest lists, and any other object there, or a
   listed file gone or of another size, fails publish (``exported.py``). With ``--manifest-sha256``
   (the digest recorded when export ended), a manifest of other bytes fails publish first: the
   manifest lies where workloads write, and one rewritten to list a planted file with its true
   size and sha256 would pass every other check. Reads the card:
   ``--card gs://…/README.md``, or, without it, env ``RLPIPE_MODEL_CARD``.
1. Lists the branch's commits; if one says ``rlpipe run <run_id>``, checks that commit holds every
   file of the export and the card with their sizes (and, for LFS files, the sha256 the manifest
   lists), and stops: done, nothing pushed again.
2. Creates the repo (``--private``) and the branch if missing, and reads the branch head.
3. Streams the export: each object is downloaded to ``--tmpdir`` (at the generation listed in 0),
   its sha256 checked against the manifest's (another one fails publish, permanent, before that
   file is sent), pre-uploaded
   (``HfApi.preupload_lfs_files``: the LFS bytes go to the Hub's storage now, and the client drops
   them from the operation), then deleted before the next one, so local disk holds one object at a
   time (or up to ``--max-shard-bytes-in-flight`` bytes of them) and memory stays bounded (the
   client sends files in chunks). Small "regular" files are kept in memory for the commit body.
4. One ``create_commit`` of all operations plus the card as README.md, on the branch head read in 2
   (``parent_commit``: a concurrent commit makes it fail, 412, rather than interleave), with the
   message ``rlpipe run <run_id> (request <request_id>)``. A rerun after a crash re-sends no LFS
   object the Hub already holds (the LFS batch API answers it without an upload action).
5. Verifies the new commit lists every file with its size (``list_repo_tree``), and, with
   ``--receipt gs://…``, writes the outcome there as JSON (repo, branch, commit, files and sizes).

The last line is ``rlpipe-publish: done|failed <class>: <message>``. Exit codes: 0 done; 2 permanent
(a 401/403, no HF_TOKEN, bad arguments, a missing export, manifest or card, an object the manifest
does not list, a file that is not what export wrote, a shard over the in-flight budget);
75 transient (429, 5xx, a commit race (409/412), network errors, SIGTERM: run it again); 1 anything
else (a commit that fails verification among them).

Environment: ``HF_TOKEN`` (required), ``HF_ENDPOINT`` (a Hub other than huggingface.co),
``STORAGE_EMULATOR_HOST`` (a fake GCS, reached with anonymous credentials), ``HF_HUB_DISABLE_XET``
(upload over LFS rather than Xet when ``hf_xet`` is installed).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import signal
import sys
import tempfile
import traceback
from dataclasses import dataclass
from typing import Any

from rlpipe.publisher.exported import NotExported, check_listing, check_sha256, commit_problems, read_manifest

PREFIX = "rlpipe-publish:"
EXIT_DONE, EXIT_ERROR, EXIT_PERMANENT, EXIT_TRANSIENT = 0, 1, 2, 75
EXIT_CODES = {"permanent": EXIT_PERMANENT, "transient": EXIT_TRANSIENT, "error": EXIT_ERROR}
TOKEN_PATTERN = re.compile(r"hf_[A-Za-z0-9]{20,}")
SIGNATURE_PATTERN = re.compile(r"((?:X-Amz-Signature|X-Amz-Credential|Signature|sig)=)[^&\s\"']+", re.I)
CARD_NAME = "README.md"
CARD_ENV = "RLPIPE_MODEL_CARD"
CARD_MAX_BYTES = 1 << 20
REGULAR_MAX_BYTES = 16 << 20  # a "regular" (non-LFS) file is sent inside the commit body
# Exception classes (by name, in the MRO) that mean the network failed, not the request: httpx's
# (the Hub client's transport), requests' (the GCS client's), google-api-core's retry deadline.
NETWORK_ERRORS = {
    "TimeoutException",
    "NetworkError",
    "RemoteProtocolError",
    "ProxyError",
    "ConnectionError",
    "Timeout",
    "ChunkedEncodingError",
    "RetryError",
    "TimeoutError",
}


class Failure(Exception):
    """A failure whose class is known: ``permanent``, ``transient`` or ``error``."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


class Console:
    """Every line this program prints, redacted of the token and of anything that looks like one."""

    def __init__(self, secrets: list[str]):
        self.secrets = [s for s in secrets if s]

    def redact(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "[redacted]")
        return SIGNATURE_PATTERN.sub(r"\1[redacted]", TOKEN_PATTERN.sub("hf_[redacted]", text))

    def say(self, text: str, *, err: bool = False) -> None:
        print(self.redact(text), file=sys.stderr if err else sys.stdout, flush=True)


class _RedactingFilter(logging.Filter):
    def __init__(self, console: Console):
        super().__init__()
        self.console = console

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = self.console.redact(record.getMessage()), ()
        return True


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would print usage and exit 2 itself
        raise Failure("permanent", f"bad arguments: {message}")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = _Parser(
        prog="rlpipe-publish", description="Publish one run's export from GCS to the Hugging Face Hub."
    )
    parser.add_argument(
        "--source", required=True, help="gs://bucket/prefix/ of the export (RunLayout.hf_dir)"
    )
    parser.add_argument(
        "--manifest",
        required=True,
        help="gs://bucket/prefix/rlpipe-export.json under --source: the files to push, with sizes and sha256",
    )
    parser.add_argument(
        "--manifest-sha256",
        help="64 hex digits: the sha256 of the manifest's bytes as recorded when export ended; "
        "a manifest with other bytes (rewritten since) fails publish before anything is sent",
    )
    parser.add_argument("--card", help=f"gs://bucket/path/README.md, the rendered card (else env {CARD_ENV})")
    parser.add_argument("--receipt", help="gs://bucket/path.json: the outcome, written once done")
    parser.add_argument("--repo", required=True, help="owner/name on the Hub")
    parser.add_argument("--branch", default="main")
    parser.add_argument("--private", choices=["true", "false"], default="true", help="if the repo is created")
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--request-id", required=True)
    parser.add_argument("--tmpdir", default=tempfile.gettempdir(), help="where one shard at a time lands")
    parser.add_argument(
        "--max-shard-bytes-in-flight",
        type=int,
        default=None,
        help="local bytes allowed at once: objects are pre-uploaded in groups up to this size "
        "(default: one object at a time); an object larger than this fails the run before any upload",
    )
    args = parser.parse_args(argv)
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", args.repo):
        raise Failure("permanent", f"bad arguments: --repo {args.repo!r} is not owner/name")
    if args.manifest_sha256 is not None and not re.fullmatch(r"[0-9a-f]{64}", args.manifest_sha256):
        raise Failure("permanent", "bad arguments: --manifest-sha256 must be 64 lower-case hex digits")
    if args.max_shard_bytes_in_flight is not None and args.max_shard_bytes_in_flight <= 0:
        raise Failure("permanent", "bad arguments: --max-shard-bytes-in-flight must be positive")
    checked = [(args.source, True), (args.manifest, False), (args.card, False), (args.receipt, False)]
    for uri, directory in checked:
        if uri is not None:
            parse_gs(uri, directory=directory)
    source, manifest = parse_gs(args.source, directory=True), parse_gs(args.manifest, directory=False)
    if manifest[0] != source[0] or not manifest[1].startswith(source[1]):
        raise Failure("permanent", f"bad arguments: --manifest {args.manifest!r} is not under --source")
    return args


def parse_gs(uri: str, *, directory: bool) -> tuple[str, str]:
    """(bucket, name) of a gs:// URI; a directory's name ends with "/" (or is "", the whole bucket)."""
    bucket, _, name = uri.removeprefix("gs://").partition("/")
    if (
        not uri.startswith("gs://")
        or not bucket
        or not (name or directory)
        or (name.endswith("/") and not directory)
    ):
        raise Failure(
            "permanent", f"bad arguments: {uri!r} is not gs://bucket/{'prefix/' if directory else 'path'}"
        )
    if directory and name and not name.endswith("/"):
        name += "/"
    return bucket, name


@dataclass
class Item:
    """One file of the export, its path in the repo and what export wrote: size and sha256."""

    blob: Any
    path: str
    size: int
    sha256: str


def gcs_client() -> Any:
    import google.cloud.storage as storage  # type: ignore[import-untyped, unused-ignore]

    if os.environ.get("STORAGE_EMULATOR_HOST"):  # a fake GCS: the client targets it, anonymously
        return storage.Client.create_anonymous_client()
    return storage.Client()


def list_export(
    gcs: Any, source: str, manifest_uri: str, console: Console, manifest_sha256: str | None = None
) -> list[Item]:
    """The manifest's files (the manifest of ``manifest_sha256`` when given), each with the object
    that holds it, once the prefix holds exactly those at their sizes (``exported.check_listing``)."""
    bucket, prefix = parse_gs(source, directory=True)
    _, manifest_name = parse_gs(manifest_uri, directory=False)
    files = read_manifest(gcs.bucket(bucket).get_blob(manifest_name), manifest_uri, manifest_sha256)
    blobs = {
        blob.name[len(prefix) :]: blob
        for blob in gcs.list_blobs(bucket, prefix=prefix)  # a folder placeholder holds nothing to push
        if blob.name != manifest_name and not (blob.name.endswith("/") and not blob.size)
    }
    check_listing(
        files, {path: int(blob.size or 0) for path, blob in blobs.items()}, f"gs://{bucket}/{prefix}"
    )
    if CARD_NAME in files:
        console.say(f"{PREFIX} note: the export's own {CARD_NAME} is replaced by the card")
    items = [Item(blobs[p], p, size, digest) for p, (size, digest) in sorted(files.items()) if p != CARD_NAME]
    if not items:
        raise NotExported(f"nothing to publish: the export manifest {manifest_uri} lists only {CARD_NAME}")
    return items


def read_card(gcs: Any, uri: str | None) -> bytes:
    if uri is None:
        text = os.environ.get(CARD_ENV, "")
        if not text.strip():
            raise Failure("permanent", f"no model card: neither --card nor env {CARD_ENV}")
        return text.encode()
    bucket, name = parse_gs(uri, directory=False)
    blob = gcs.bucket(bucket).get_blob(name)
    if blob is None:
        raise Failure("permanent", f"the model card {uri} does not exist")
    if int(blob.size or 0) > CARD_MAX_BYTES:
        raise Failure("permanent", f"the model card {uri} is over {CARD_MAX_BYTES} bytes")
    data: bytes = blob.download_as_bytes()
    return data


def http_status(exc: BaseException) -> int | None:
    """The HTTP status of a Hub (``HfHubHTTPError.response``) or GCS (``GoogleAPICallError.code``) error."""
    code = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(code, int):
        return code
    code = getattr(exc, "code", None)
    if isinstance(code, int) and type(exc).__module__.startswith("google."):
        return code
    return None


def classify(exc: BaseException) -> tuple[str, str]:
    """(class, message) of a failure, from the first link of its chain that says what it is (the
    client wraps an LFS upload's HTTP error in a RuntimeError, ``_commit_api.py:525-530``)."""
    message = f"{type(exc).__name__}: {exc}".strip()
    node: BaseException | None = exc
    seen: set[int] = set()
    while node is not None and id(node) not in seen:
        seen.add(id(node))
        if isinstance(node, Failure):
            return node.kind, str(node)
        if isinstance(node, NotExported):
            return "permanent", str(node)
        status = http_status(node)
        if status is not None:
            gcs = type(node).__module__.startswith("google.")
            if status in (401, 403) or (status == 404 and gcs):  # GCS 404: no such export or bucket
                return "permanent", f"HTTP {status}: {message}"
            if status == 429 or status >= 500 or status in (408, 409, 412):
                return "transient", f"HTTP {status}: {message}"
            return "error", f"HTTP {status}: {message}"
        names = {c.__name__ for c in type(node).__mro__}
        google_transport = "TransportError" in names and type(node).__module__.startswith("google.")
        if names & NETWORK_ERRORS or google_transport:
            return "transient", f"network: {message}"
        node = node.__cause__ or node.__context__
    return "error", message


def commit_message(run_id: str, request_id: str) -> str:
    return f"rlpipe run {run_id} (request {request_id})"


def find_published(api: Any, repo: str, branch: str, run_id: str) -> Any:
    """The branch's commit for this run, or None (also when the repo or branch does not exist yet)."""
    from huggingface_hub.errors import HfHubHTTPError

    marker = re.compile(rf"\brlpipe run {re.escape(run_id)}(?=[\s)]|$)")
    try:
        commits = api.list_repo_commits(repo, revision=branch)
    except HfHubHTTPError as exc:
        if http_status(exc) == 404:  # with a token, a missing repo or branch is 404 (401: bad token)
            return None
        raise
    return next((c for c in commits if marker.search(f"{c.title}\n{c.message or ''}")), None)


def verify(
    api: Any, repo: str, revision: str, expected: dict[str, int], digests: dict[str, str] | None = None
) -> None:
    """The commit holds every expected file at its size, and each the Hub keeps in LFS (named by
    its sha256) has the sha256 export wrote (``digests``): ``exported.commit_problems``."""
    from huggingface_hub import RepoFile

    remote = {
        entry.path: (entry.size, entry.lfs.sha256 if entry.lfs is not None else None)
        for entry in api.list_repo_tree(repo, revision=revision, recursive=True)
        if isinstance(entry, RepoFile)
    }
    if problems := commit_problems(remote, expected, digests or {}):
        raise Failure("error", f"verification failed at {repo}@{revision[:12]}: {'; '.join(problems)}")


def groups(items: list[Item], budget: int | None) -> list[list[Item]]:
    """Consecutive objects whose sizes add up to at most ``budget`` (one each without a budget)."""
    out: list[list[Item]] = []
    size = 0
    for item in items:
        if not out or budget is None or size + item.size > budget:
            out.append([])
            size = 0
        out[-1].append(item)
        size += item.size
    return out


def check_room(items: list[Item], budget: int | None, tmpdir: str) -> None:
    if budget is not None and (big := [i for i in items if i.size > budget]):
        names = ", ".join(f"{i.path} ({i.size} bytes)" for i in big)
        raise Failure("permanent", f"over --max-shard-bytes-in-flight={budget}: {names}")
    need = max(sum(i.size for i in group) for group in groups(items, budget))
    free = shutil.disk_usage(tmpdir).free
    if free < need:
        raise Failure("permanent", f"{tmpdir} has {free} bytes free; a shard group needs {need}")


def upload(api: Any, args: argparse.Namespace, items: list[Item], card: bytes, console: Console) -> list[Any]:
    """Pre-upload every object, at most one group on disk at a time; the operations for the commit."""
    from huggingface_hub import CommitOperationAdd

    total = sum(i.size for i in items) + len(card)
    done = 0
    operations: list[Any] = []
    workdir = tempfile.mkdtemp(prefix="rlpipe-publish-", dir=args.tmpdir)
    try:
        for group in groups(items, args.max_shard_bytes_in_flight):
            staged: list[tuple[Item, Any, str]] = []
            for item in group:
                local = os.path.join(workdir, f"{len(operations) + len(staged):05d}.part")
                item.blob.download_to_filename(local)
                if os.path.getsize(local) != item.size:
                    raise Failure(
                        "transient",
                        f"{item.path}: downloaded {os.path.getsize(local)} bytes, listed {item.size}",
                    )
                check_sha256(local, item.path, item.sha256)
                staged.append(
                    (item, CommitOperationAdd(path_in_repo=item.path, path_or_fileobj=local), local)
                )
            api.preupload_lfs_files(args.repo, additions=[op for _, op, _ in staged], revision=args.branch)
            for item, op, local in staged:
                mode = getattr(op, "_upload_mode", None)  # set by the preupload call ("lfs"/"regular")
                if mode != "lfs":  # sent inside the commit body: keep the (small) bytes, not the file
                    if item.size > REGULAR_MAX_BYTES:
                        raise Failure(
                            "error", f"{item.path}: the Hub wants {item.size} bytes as a regular file"
                        )
                    with open(local, "rb") as handle:
                        op.path_or_fileobj = handle.read()
                os.unlink(local)
                done += item.size
                operations.append(op)
                console.say(f"{PREFIX} uploaded {item.path} {item.size} bytes ({mode}) {done}/{total} bytes")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    operations.append(CommitOperationAdd(path_in_repo=CARD_NAME, path_or_fileobj=card))
    console.say(f"{PREFIX} uploaded {CARD_NAME} {len(card)} bytes (card) {done + len(card)}/{total} bytes")
    return operations


def write_receipt(
    gcs: Any, args: argparse.Namespace, outcome: str, commit: str, files: dict[str, int]
) -> None:
    bucket, name = parse_gs(args.receipt, directory=False)
    body = {
        "run_id": args.run_id,
        "request_id": args.request_id,
        "repo": args.repo,
        "branch": args.branch,
        "outcome": outcome,
        "commit": commit,
        "files": files,
    }
    data = json.dumps(body, indent=2, sort_keys=True)
    gcs.bucket(bucket).blob(name).upload_from_string(data, content_type="application/json")


def publish(args: argparse.Namespace, token: str, console: Console) -> str:
    """Publish; returns the done line's ``<class>: <message>``."""
    outcome, commit, message, files, gcs = _publish(args, token, console)
    if args.receipt is not None:
        write_receipt(gcs, args, outcome, commit, files)
    return f"{outcome}: {message}"


def _publish(
    args: argparse.Namespace, token: str, console: Console
) -> tuple[str, str, str, dict[str, int], Any]:
    from huggingface_hub import HfApi
    from huggingface_hub.utils import disable_progress_bars

    disable_progress_bars()  # our own progress lines instead of tqdm bars on stderr
    api = HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None, token=token)
    gcs = gcs_client()
    items = list_export(gcs, args.source, args.manifest, console, args.manifest_sha256)
    card = read_card(gcs, args.card)
    expected = {i.path: i.size for i in items} | {CARD_NAME: len(card)}
    digests = {i.path: i.sha256 for i in items}
    where = f"{args.repo}@{args.branch}"

    published = find_published(api, args.repo, args.branch, args.run_id)
    if published is not None:
        sha = published.commit_id
        verify(api, args.repo, sha, expected, digests)
        said = f"run {args.run_id} is commit {sha} on {where}; {len(expected)} files verified"
        return "already-published", sha, said, expected, gcs

    os.makedirs(args.tmpdir, exist_ok=True)
    check_room(items, args.max_shard_bytes_in_flight, args.tmpdir)
    private = args.private == "true"
    api.create_repo(args.repo, private=private, exist_ok=True)
    api.create_branch(args.repo, branch=args.branch, exist_ok=True)
    info = api.model_info(args.repo, revision=args.branch)
    if info.private is not None and bool(info.private) != private:
        console.say(f"{PREFIX} note: {args.repo} already exists with private={info.private}; left as it is")
    head = str(info.sha)
    console.say(f"{PREFIX} publishing {len(expected)} files to {where} (head {head[:12]})")

    operations = upload(api, args, items, card, console)
    message = commit_message(args.run_id, args.request_id)
    commit = api.create_commit(
        args.repo, operations, commit_message=message, revision=args.branch, parent_commit=head
    )
    if commit.oid == head:  # every file already identical at the head: the client made no commit
        verify(api, args.repo, head, expected, digests)
        return (
            "unchanged",
            head,
            f"{where} already holds these exact files at {head}; no commit made",
            expected,
            gcs,
        )
    verify(api, args.repo, commit.oid, expected, digests)
    said = f"commit {commit.oid} on {where}; {len(expected)} files, {sum(expected.values())} bytes"
    return "published", commit.oid, said, expected, gcs


def main(argv: list[str] | None = None) -> int:
    token = os.environ.get("HF_TOKEN", "").strip()
    console = Console([token])
    redacting = _RedactingFilter(console)
    handlers: list[logging.Handler] = []
    try:
        import huggingface_hub.utils.logging  # noqa: F401 - its import adds the library's stderr handler

        # The client logs retried URLs (signed upload URLs among them); other libraries log through
        # the root logger or, with no handler there, logging.lastResort.
        handlers = [*logging.getLogger("huggingface_hub").handlers, *logging.getLogger().handlers]
        handlers += [logging.lastResort] if logging.lastResort is not None else []
        for handler in handlers:
            handler.addFilter(redacting)
        args = parse_args(sys.argv[1:] if argv is None else argv)
        if not token:
            raise Failure("permanent", "HF_TOKEN is not set (the Job reads it from its Secret)")
        outcome = publish(args, token, console)
    except Exception as exc:  # every failure ends in one classified line
        kind, message = classify(exc)
        if kind == "error" and not isinstance(exc, Failure):
            console.say("".join(traceback.format_exception(exc)).rstrip(), err=True)
        console.say(f"{PREFIX} failed {kind}: {message}")
        return EXIT_CODES[kind]
    finally:
        for handler in handlers:
            handler.removeFilter(redacting)
    console.say(f"{PREFIX} done {outcome}")
    return EXIT_DONE


def _terminated(signum: int, frame: Any) -> None:
    raise Failure("transient", f"stopped by signal {signum} (the pod is going away); run it again")


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _terminated)  # Kubernetes stops a pod with SIGTERM, then SIGKILL
    sys.exit(main())
