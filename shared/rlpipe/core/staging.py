"""The head's first step: the run's inputs, exactly as pinned, where train_rl will read them.

MaxText 0.2.4 loads a Hub dataset by name with no revision (``datasets.load_dataset(name,
name=hf_subset, split=...)``, ``train_rl.py:170-185``), into a cache the head has no volume for,
so the data it trains on could change between plan and train, or between two attempts. Given
``hf_train_files``/``hf_eval_files`` it loads parquet files instead (``load_dataset("parquet",
data_files={split: files})``, same lines), and ``gcsfs`` (a dependency of MaxText's
``tpu-post-train`` extra) lets those be ``gs://`` patterns. So the pipeline stages the pinned
commit's parquet files under the run's own prefix (``layout.RunLayout.data``) and points train_rl
at them:

1. the user's files (reward functions, processor, chat template) are fetched from the run's copy
   (intake wrote it), their sha256 checked against the ledger's, and written where train_rl
   imports them (``load_custom_callable`` needs a local file: ``utils_rl.py:887-905``); a mismatch
   exits 2 and nothing runs;
2. the first attempt streams each data file from the Hub at the pinned commit to GCS, checking its
   size and the sha256 the Hub listed at plan, and writes ``rlpipe-data.json`` last; a later
   attempt finds it and checks every staged file's sha256 again instead. Either way, no other
   object may sit under the staged splits: ``hf_train_files`` is a glob, and train_rl would read it.

The program is fixed text run with ``python3 -c``; what it copies reaches it as JSON in the
container's environment, never in the script. Exit 2: the inputs are not what was pinned, are gone,
or the Hub refuses them to the request's token (permanent); 75 (EX_TEMPFAIL): the Hub or GCS
failed on the way (transient). Pure: strings only.
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Mapping
from typing import Any

from rlpipe.core import layout

ENV_DATA_PLAN = "RLPIPE_DATA_PLAN"
ENV_USER_FILES = "RLPIPE_USER_FILES"
MARK = "rlpipe-inputs:"
USER_DIR = "/tmp/rlpipe/user"  # small files: no volume on the head (like pinning.HEAD_PINNED_DIR)
EXIT_NOT_PINNED, EXIT_TRANSIENT = 2, 75
# The user's files by role: the local name train_rl is pointed at, and the MaxText key.
USER_FILES: dict[str, tuple[str, str]] = {
    "rewards": ("rewards.py", "reward_functions_path"),
    "processor": ("processor.py", "dataset_processor_path"),
    "chat_template": ("chat_template.json", "data_template_path"),
}
ROLES = ("train", "eval")
# What scores the rollouts when a request names no reward functions: MaxText's built-in three
# (maxtext 0.2.4 train_rl.py:420-424); a request's `rewards` replace them, not add to them.
BUILTIN_REWARDS = ("match_format_exactly", "match_format_approximately", "check_numbers")
BUILTIN_REWARDS_SOURCE = "maxtext 0.2.4 train_rl.py:420-424"
# Datasets train_rl splits itself when they are also the evaluation dataset: 5% of the training
# split held out, seeded by data_shuffle_seed (maxtext 0.2.4 train_rl.py:253-279, 306-330); no
# evaluation split of theirs is read, so none is staged.
SELF_SPLIT_DATASETS = frozenset(
    {
        "nvidia/OpenMathInstruct-2",
        "nvidia/OpenMathReasoning",
        "open-r1/OpenR1-Math-220k",
        "bethgelab/CuratedThoughts",
    }
)


HELD_OUT_FRACTION = 0.05  # train_rl.py: prepare_train_and_eval_dataset(test_size=0.05)


def splits_itself(repo: str, eval_repo: str) -> bool:
    """Whether train_rl evaluates on examples it holds out of the training split."""
    return repo in SELF_SPLIT_DATASETS and eval_repo == repo


def training_examples(repo: str, eval_repo: str, rows: int | None) -> int | None:
    """The examples train_rl trains on from a training split of ``rows``: all of them, or what
    ``train_test_split(test_size=0.05)`` leaves when it holds its evaluation out (the test side
    takes ``ceil(0.05 × rows)``: datasets 5.2.0 ``arrow_dataset.py:5144,5154``)."""
    if rows is None or not splits_itself(repo, eval_repo):
        return rows
    return rows - math.ceil(HELD_OUT_FRACTION * rows)


_PROGRAM = f"""\
import hashlib, json, os, pathlib, sys
from google.api_core.exceptions import NotFound
from google.cloud import storage
CHUNK = 8 << 20
def say(text):
    print("{MARK} " + text, flush=True)
def stop(code, text):
    say(text)
    sys.exit(code)
client = storage.Client()
def blob_of(uri):
    _, _, bucket, name = uri.split("/", 3)
    return client.bucket(bucket).blob(name)
def digest(blob):
    h, n = hashlib.sha256(), 0
    with blob.open("rb", chunk_size=CHUNK) as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
            n += len(chunk)
    return h.hexdigest(), n
def only_pinned(plan):
    wanted = {{u.split("/", 3)[3] for u in [plan["manifest"], *(f["target"] for f in plan["files"])]}}
    _, _, bucket, prefix = plan["dest"].split("/", 3)
    for blob in client.list_blobs(bucket, prefix=prefix):
        if blob.name not in wanted:
            stop({EXIT_NOT_PINNED}, f"{{blob.name}} in bucket {{bucket}} is not a file plan pinned, and train_rl would read it")
try:
    for f in json.loads(os.environ.get("{ENV_USER_FILES}") or "[]"):
        try:
            data = blob_of(f["uri"]).download_as_bytes()
        except NotFound:
            stop({EXIT_NOT_PINNED}, f"{{f['role']}}: the run's copy {{f['uri']}} is gone; not running without it")
        got = hashlib.sha256(data).hexdigest()
        if got != f["sha256"]:
            stop({EXIT_NOT_PINNED}, f"{{f['role']}}: {{f['uri']}} has sha256 {{got}}, the run recorded {{f['sha256']}}; not running other code than intake checked")
        local = pathlib.Path(f["local"])
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_bytes(data)
        say(f"{{f['role']}}: {{f['uri']}} (sha256 {{got[:12]}}) verified, at {{local}}")
    plan = json.loads(os.environ.get("{ENV_DATA_PLAN}") or "null")
    if plan:
        files, total = plan["files"], sum(f["size"] for f in plan["files"])
        if blob_of(plan["manifest"]).exists():
            for i, f in enumerate(files, 1):
                try:
                    got, size = digest(blob_of(f["target"]))
                except NotFound:
                    stop({EXIT_NOT_PINNED}, f"{{f['target']}}, staged from {{f['repo']}}@{{f['sha'][:12]}}/{{f['path']}}, is gone")
                if (f.get("sha256") and got != f["sha256"]) or size != f["size"]:
                    stop({EXIT_NOT_PINNED}, f"{{f['target']}} is not the file staged from {{f['repo']}}@{{f['sha'][:12]}}/{{f['path']}} (sha256 {{got[:12]}}, {{size}} bytes)")
            only_pinned(plan)
            say(f"data: {{len(files)}} staged files ({{total}} bytes) verified against the pinned commits")
        else:
            from huggingface_hub import HfFileSystem
            fs, done = HfFileSystem(), 0
            for i, f in enumerate(files, 1):
                source = f"datasets/{{f['repo']}}@{{f['sha']}}/{{f['path']}}"
                h, n = hashlib.sha256(), 0
                target = blob_of(f["target"])
                with fs.open(source, "rb", block_size=CHUNK) as r, target.open("wb", chunk_size=CHUNK) as w:
                    for chunk in iter(lambda: r.read(CHUNK), b""):
                        h.update(chunk)
                        w.write(chunk)
                        n += len(chunk)
                if (f.get("sha256") and h.hexdigest() != f["sha256"]) or n != f["size"]:
                    target.delete()
                    stop({EXIT_NOT_PINNED}, f"{{source}} is not what plan pinned: sha256 {{h.hexdigest()[:12]}}, {{n}} bytes")
                done += n
                say(f"data: staged {{i}}/{{len(files)}} {{source}} ({{done}}/{{total}} bytes)")
            only_pinned(plan)
            blob_of(plan["manifest"]).upload_from_string(json.dumps({{"files": files}}, indent=1, sort_keys=True), if_generation_match=0)
            say(f"data: {{len(files)}} files staged at {{plan['dest']}}")
except SystemExit:
    raise
except Exception as exc:
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(exc, FileNotFoundError) or status in (401, 403, 404):
        stop({EXIT_NOT_PINNED}, f"the Hub refused the pinned data ({{type(exc).__name__}}: {{exc}}); check that hf_token_secret's token may read it")
    stop({EXIT_TRANSIENT}, f"staging failed on the way ({{type(exc).__name__}}: {{exc}}); the attempt can be retried")
"""


def stage_line() -> str:
    """The head's step before train_rl: user files verified, data staged (or verified)."""
    return f"python3 -c {shlex.quote(_PROGRAM)}"


def user_file_path(role: str) -> str:
    return f"{USER_DIR}/{USER_FILES[role][0]}"


def user_files_env(inputs: Mapping[str, Mapping[str, Any]] | None) -> list[dict[str, str]]:
    """What the program fetches and checks: each recorded file's run copy, sha256 and local path."""
    return [
        {
            "role": role,
            "uri": str(entry["uri"]),
            "sha256": str(entry["sha256"]),
            "local": user_file_path(role),
        }
        for role, entry in sorted((inputs or {}).items())
        if role in USER_FILES
    ]


def data_plan(run: layout.RunLayout, data: Mapping[str, Mapping[str, Any]] | None) -> dict[str, Any] | None:
    """Every pinned data file with its source (repo, commit, path), size, sha256 and staged name.

    ``data`` is ``lineage.data`` (``{"train": …, "eval": …}``, each a pinned split with its
    ``files``); None before plan has pinned anything."""
    if not data:
        return None
    files = []
    for role in ROLES:
        entry = data.get(role)
        if not entry:
            continue
        for index, f in enumerate(entry.get("files") or []):
            files.append(
                {
                    "role": role,
                    "repo": str(entry["repo"]),
                    "sha": str(entry["sha"]),
                    "path": str(f["path"]),
                    "size": int(f["size"]),
                    "sha256": f.get("sha256"),
                    "target": run.uri(run.data_file(role, index)),
                }
            )
    return {"dest": run.uri(run.data), "manifest": run.uri(run.data_manifest), "files": files}


def data_files_pattern(run: layout.RunLayout, role: str) -> str:
    """``hf_train_files``/``hf_eval_files``: every staged parquet file of one split (a gcsfs glob)."""
    return run.uri(run.data_split(role)) + "*.parquet"


def env(
    run: layout.RunLayout, data: Mapping[str, Any] | None, inputs: Mapping[str, Any] | None
) -> list[dict[str, str]]:
    """The program's environment entries (JSON values: never pasted into the script)."""
    out = []
    plan = data_plan(run, data)
    if plan is not None:
        out.append({"name": ENV_DATA_PLAN, "value": json.dumps(plan, sort_keys=True, separators=(",", ":"))})
    files = user_files_env(inputs)
    if files:
        out.append(
            {"name": ENV_USER_FILES, "value": json.dumps(files, sort_keys=True, separators=(",", ":"))}
        )
    return out
