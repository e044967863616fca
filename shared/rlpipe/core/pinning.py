"""Every read of the Hugging Face repo at the pinned sha: the fixed programs that make it so.

In MaxText 0.2.4 only the conversion's weight download honours ``--revision``. The file listing
(``list_repo_files``), train_rl's tokenizer (``tokenizer_path``, also vLLM's model path) and the
export's tokenizer (``--hf_model_path``) read the repo's default branch. So the pipeline pins
them itself:

1. convert: ``snapshot_download`` at the sha into the convert volume, converts from that local
   directory (``--hf_model_path`` accepts one; the listing is then local), and copies the repo's
   non-weight files (tokenizer, config, chat template) to ``layout.pinned_source_dir`` with a
   manifest (``rlpipe-pinned.json``) written last;
2. train and export: fetch those files to a local directory and point ``tokenizer_path`` and
   ``--hf_model_path`` at it.

The programs are fixed text run with ``python3 -c``; every value reaches them through the
container's environment (``RLPIPE_*``), never through the script text. Pure: strings only.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

ENV_REPO = "RLPIPE_HF_REPO"
ENV_REVISION = "RLPIPE_HF_REVISION"
ENV_SNAPSHOT_DIR = "RLPIPE_SNAPSHOT_DIR"
ENV_PINNED_URI = "RLPIPE_PINNED_URI"
ENV_PINNED_DIR = "RLPIPE_PINNED_DIR"

SCRATCH_VOLUME = "scratch"
SCRATCH_MOUNT = "/scratch"
SNAPSHOT_DIR = f"{SCRATCH_MOUNT}/hf-snapshot"  # the repo at the sha; to_maxtext reads it
HF_HOME_DIR = f"{SCRATCH_MOUNT}/hf-home"
TMP_DIR = f"{SCRATCH_MOUNT}/tmp"  # to_huggingface stages its shards under $TMPDIR
EXPORT_PINNED_DIR = f"{SCRATCH_MOUNT}/hf-source"
HEAD_PINNED_DIR = "/tmp/rlpipe/hf-source"  # small (tokenizer + config): no volume on the head
MANIFEST_NAME = "rlpipe-pinned.json"

# Weight formats the conversion does not read (it reads safetensors only): not downloaded.
SKIPPED_PATTERNS = ("*.bin", "*.pt", "*.pth", "*.gguf", "*.onnx", "*.h5", "*.msgpack", "*.ckpt", "original/*")
WEIGHT_SUFFIXES = (".safetensors", *(p[1:] for p in SKIPPED_PATTERNS if p.startswith("*.")))

_PIN_PROGRAM = f"""\
import hashlib, json, os, pathlib, sys
from huggingface_hub import snapshot_download
from google.cloud import storage
repo, rev = os.environ["{ENV_REPO}"], os.environ["{ENV_REVISION}"]
local, dest = pathlib.Path(os.environ["{ENV_SNAPSHOT_DIR}"]), os.environ["{ENV_PINNED_URI}"]
print(f"rlpipe-pin: downloading {{repo}} at {{rev}} into {{local}}", flush=True)
snapshot_download(repo_id=repo, revision=rev, local_dir=str(local), ignore_patterns={json.dumps(list(SKIPPED_PATTERNS))})
_, _, bucket_name, prefix = dest.split("/", 3)
bucket = storage.Client().bucket(bucket_name)
files = []
for path in sorted(p for p in local.rglob("*") if p.is_file()):
    rel = path.relative_to(local).as_posix()
    if rel.startswith(".cache/"):
        continue
    entry = {{"path": rel, "size": path.stat().st_size}}
    if not rel.endswith(tuple({json.dumps(list(WEIGHT_SUFFIXES))})):
        entry["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
        bucket.blob(prefix + rel).upload_from_filename(str(path))
        entry["copied"] = True
    files.append(entry)
if not any(e["path"].endswith(".safetensors") for e in files):
    sys.exit(f"rlpipe-pin: {{repo}} at {{rev}} has no safetensors weights")
manifest = {{"hf_repo": repo, "revision": rev, "files": files}}
bucket.blob(prefix + "{MANIFEST_NAME}").upload_from_string(json.dumps(manifest, indent=1, sort_keys=True))
copied = sum(1 for e in files if e.get("copied"))
print(f"rlpipe-pin: copied {{copied}} files and {MANIFEST_NAME} to {{dest}}", flush=True)
"""

_FETCH_PROGRAM = f"""\
import os, pathlib, sys
from google.cloud import storage
src, local = os.environ["{ENV_PINNED_URI}"], pathlib.Path(os.environ["{ENV_PINNED_DIR}"])
_, _, bucket_name, prefix = src.split("/", 3)
blobs = [b for b in storage.Client().list_blobs(bucket_name, prefix=prefix) if not b.name.endswith("/")]
if not any(b.name == prefix + "{MANIFEST_NAME}" for b in blobs):
    sys.exit(f"rlpipe-fetch: no pinned files at {{src}} ({MANIFEST_NAME} is missing)")
for blob in blobs:
    target = local / blob.name[len(prefix):]
    target.parent.mkdir(parents=True, exist_ok=True)
    blob.download_to_filename(str(target))
print(f"rlpipe-fetch: {{len(blobs)}} files from {{src}} in {{local}}", flush=True)
"""


def pin_line() -> str:
    """The convert Job's first step: the repo at the sha, locally and (non-weight files) in GCS."""
    return f"python3 -c {shlex.quote(_PIN_PROGRAM)}"


def fetch_line() -> str:
    """Train and export: the pinned non-weight files, from GCS into ``$RLPIPE_PINNED_DIR``."""
    return f"python3 -c {shlex.quote(_FETCH_PROGRAM)}"


def lineage(
    hf_repo: str, revision: str, pinned_uri: str, tokenizer_path: str | None, *, resolved: bool
) -> dict[str, Any]:
    """What was pinned, and how, for the run's lineage (``RunRecord.lineage.pinning``).

    ``tokenizer_path`` is the request's own value when it set one (then train reads it as given).
    """
    at = revision if resolved else f"{revision} (not yet resolved to a sha)"
    train_tok = (
        f"{pinned_uri} (fetched to {HEAD_PINNED_DIR}; also vLLM's model path)"
        if tokenizer_path is None
        else f"{tokenizer_path} (set by the request; not pinned)"
    )
    return {
        "hf_repo": hf_repo,
        "revision": revision,
        "resolved": resolved,
        "weights": f"snapshot_download({hf_repo}, revision={at}) into the convert volume; to_maxtext reads it",
        "file_listing": "the local snapshot (to_maxtext's own listing reads the default branch)",
        "pinned_files": pinned_uri,
        "manifest": f"{pinned_uri}{MANIFEST_NAME} (every file with size; sha256 of each copied file)",
        "train_tokenizer": train_tok,
        "export_tokenizer": f"{pinned_uri} (fetched to {EXPORT_PINNED_DIR}; --hf_model_path)",
        "hf_config": "MaxText's built-in table for the model (HF_MODEL_CONFIGS), not read from the repo",
    }
