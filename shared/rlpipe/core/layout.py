"""Every GCS path of a run, and the rule that says when each stage's output is complete.

This module is the only place that spells an object name (docs/design.md#the-gcs-layout). The completion rules
follow what MaxText and Orbax actually write (docs/design.md#stages-and-what-done-means): Orbax writes a step directory in place
under its final name and marks it complete with ``commit_success.txt`` last. The HF export has no
marker of MaxText's; the export script's own step writes one, the export manifest
(:data:`EXPORT_MANIFEST`), last: every file the program wrote, with its size and sha256
(``core.export_manifest``).

Two buckets hold what the pipeline writes, and each name below says which (docs/security.md):

- the **artifacts** bucket holds what workloads write: ``runs/<id>/trained/``, ``runs/<id>/hf/``,
  the conversion attempts ``cache/maxtext/<key>/<run>-a<N>/`` and Pathways scratch; a declared
  team's runs and conversions the same under ``teams/<team>/`` (:func:`team_prefix`), the prefix
  that team's operators alone may read. The workload identity may write there, under
  :data:`WORKLOAD_PREFIXES` only; completeness is read there.
- the **state** bucket holds the control plane's own records: each run's ledger, events and error
  record (``runs/<id>/run.json``, ``events/``, ``error.json``), the conversion cache's
  ``cache/maxtext/<key>/READY.json``, the upstream watcher's ``upstream/<repo>/state.json`` and the
  reconcile cursor. Only the functions reach it (:data:`STATE_PREFIXES`); no workload can rewrite a
  ledger, point a cache key at its own checkpoint or forge an upstream decision.

Both buckets use the same name scheme (a run's objects under ``runs/<id>/`` in each, a team's run's
artifacts behind its team's prefix), so a run is found by its id wherever it lives.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeGuard

from rlpipe.core import presets
from rlpipe.core import steps as step_rules

if TYPE_CHECKING:
    # What the step rules read of a request (a Protocol): the request package imports this module.
    from rlpipe.core.steps import Request

REQUESTS_PREFIX = "requests/"
REQUEST_SUFFIXES = (".json", ".yaml", ".yml")
# A request's own files uploaded beside it (control/lifecycle/user_files.py): code, and chat templates
# spelled so that no template is taken for a JSON request. Intake reads them only when a request
# names them.
USER_FILE_SUFFIXES = (".py", ".template.json")
RUNS_PREFIX = "runs/"
CACHE_PREFIX = "cache/maxtext/"
PATHWAYS_PREFIX = "pathways/"
UPSTREAM_PREFIX = "upstream/"
RECONCILE_PREFIX = "reconcile/"
RECONCILE_CURSOR = f"{RECONCILE_PREFIX}cursor.json"  # state bucket
TEAMS_PREFIX = "teams/"  # state bucket: each team's usage (core.team_limits), written by stage only

# Where each bucket's objects live (Terraform's IAM conditions grant exactly these prefixes).
STATE_PREFIXES = (RUNS_PREFIX, CACHE_PREFIX, UPSTREAM_PREFIX, RECONCILE_PREFIX, TEAMS_PREFIX)
# A team's runs and conversions, where the deployment declares teams: TEAMS_PREFIX + <team>/ + the
# names above (team_prefix), so that an IAM condition grants one team's operators its own.
WORKLOAD_PREFIXES = (RUNS_PREFIX, CACHE_PREFIX, PATHWAYS_PREFIX, TEAMS_PREFIX)

COMMIT_MARKER = "commit_success.txt"
TRAIN_RUN_NAME = "rl"
CONVERTED_STEP = 0
HF_INDEX = "model.safetensors.index.json"
HF_SINGLE = "model.safetensors"
HF_CONFIG = "config.json"
PINNED_SOURCE_DIR = "hf-source/"  # the HF repo's non-weight files at the pinned sha
PINNED_MANIFEST = "rlpipe-pinned.json"  # written last by the convert Job: repo, sha, every file


DATA_MANIFEST = "rlpipe-data.json"
# Written last by the export Job's own step (core/export_manifest.py): every file to_huggingface
# wrote, with its size and sha256. Publish pushes exactly these files, and nothing else under the
# export's prefix may exist.
EXPORT_MANIFEST = "rlpipe-export.json"


def gs(bucket: str, name: str) -> str:
    return f"gs://{bucket}/{name}"


def parse_gs(uri: str) -> tuple[str, str]:
    """``gs://bucket/name`` → (bucket, name)."""
    if not uri.startswith("gs://"):
        raise ValueError(f"not a gs:// URI: {uri!r}")
    bucket, _, name = uri[5:].partition("/")
    return bucket, name


def is_request_object(name: str) -> bool:
    """Only these objects in the requests bucket start a run (nothing the pipeline writes matches)."""
    # Extensions in any case: `team.YAML` from a Windows editor is a request too.
    return (
        name.startswith(REQUESTS_PREFIX)
        and name.lower().endswith(REQUEST_SUFFIXES)
        and not is_user_file(name)
        and "/." not in name
    )


def is_user_file(name: str) -> bool:
    """A request's own file (reward functions, processor, chat template) beside it in ``requests/``."""
    return name.startswith(REQUESTS_PREFIX) and name.lower().endswith(USER_FILE_SUFFIXES)


def request_namespace(name: str) -> str:
    """The request_id namespace of a request object: its first folder below ``requests/``
    (``requests/team-a/x.yaml`` → ``team-a``); "" for a file directly in ``requests/`` and for
    Pub/Sub messages. A deployment grants each team object creation under its own folder only
    (``var.request_namespaces``, an IAM condition on the name prefix), so the folder is as good
    as the submitter's identity for scoping ids."""
    rest = name.removeprefix(REQUESTS_PREFIX)
    folder, slash, _ = rest.partition("/")
    return folder if slash and name.startswith(REQUESTS_PREFIX) else ""


def team_usage(team: str) -> str:
    """A team's usage: its runs holding a place, its queue, its chip-hours by month (state bucket)."""
    return f"{TEAMS_PREFIX}{team}/usage.json"


def upstream_state(repo: str) -> str:
    """What the upstream watcher decided about ``repo`` (state bucket)."""
    return f"{UPSTREAM_PREFIX}{repo}/state.json"


def team_prefix(scope: str) -> str:
    """Where a team's runs and conversions live in the artifacts bucket (``teams/<team>/``); "" for
    the deployment's one team. ``scope`` is ``Teams.cache_scope``: the team's name where the
    deployment declares teams."""
    return f"{TEAMS_PREFIX}{scope}/" if scope else ""


@dataclass(frozen=True)
class RunLayout:
    """Object names of one run: its ledger, events and error record in the state bucket, its
    outputs (trained checkpoints, exported model) in the artifacts bucket. ``bucket`` is the bucket
    whose URIs ``uri`` spells; the names are the same in either."""

    bucket: str
    run_id: str
    # Whose run it is where the deployment declares teams (``Teams.cache_scope``): its artifacts
    # then live under teams/<team>/runs/<id>/, a prefix an IAM condition grants to that team's
    # operators alone (infra/terraform/teams.tf). The state bucket's names never take it: the
    # control plane and the CLI find a ledger by the run id alone.
    scope: str = ""

    @property
    def prefix(self) -> str:
        """State bucket: the run's ledger, events, error record and page."""
        return f"{RUNS_PREFIX}{self.run_id}/"

    @property
    def artifacts_prefix(self) -> str:
        """Artifacts bucket: everything the run's workloads and intake write for it."""
        return f"{team_prefix(self.scope)}{RUNS_PREFIX}{self.run_id}/"

    @property
    def ledger(self) -> str:
        """State bucket."""
        return f"{self.prefix}run.json"

    @property
    def events_prefix(self) -> str:
        """State bucket."""
        return f"{self.prefix}events/"

    def event(self, seq: int, what: str) -> str:
        return f"{self.events_prefix}{seq:06d}-{what}.json"

    @property
    def error(self) -> str:
        """State bucket."""
        return f"{self.prefix}error.json"

    @property
    def delivery(self) -> str:
        """State bucket: where a delivery whose request names its run by ``request_id`` (so the
        delivery's own id is not the run's) records which run it went to: ``rlpipe submit`` and
        ``rlpipe status DELIVERY`` read it (``Ledger.delivery``)."""
        return f"{self.prefix}delivery.json"

    @property
    def report(self) -> str:
        """State bucket: the run's page (``rlpipe.report``) as the control plane last wrote it,
        when publish launched and when the run ended; the model card links it."""
        return f"{self.prefix}report.html"

    @property
    def trained_base(self) -> str:
        """train_rl ``base_output_directory`` (run_name ``rl`` is appended by MaxText); artifacts bucket."""
        return f"{self.artifacts_prefix}trained/"

    @property
    def checkpoints(self) -> str:
        return f"{self.trained_base}{TRAIN_RUN_NAME}/checkpoints/actor/"

    def step_dir(self, step: int) -> str:
        return f"{self.checkpoints}{step}/"

    def step_commit(self, step: int) -> str:
        return f"{self.step_dir(step)}{COMMIT_MARKER}"

    def model_params(self, step: int) -> str:
        return f"{self.step_dir(step)}model_params/"

    @property
    def hf_dir(self) -> str:
        """Artifacts bucket."""
        return f"{self.artifacts_prefix}hf/"

    @property
    def export_manifest(self) -> str:
        """Artifacts bucket: written last by the export Job (:data:`EXPORT_MANIFEST`)."""
        return f"{self.hf_dir}{EXPORT_MANIFEST}"

    @property
    def publish_receipt(self) -> str:
        """Artifacts bucket: what the publish Job pushed (repo, branch, commit, every file's size)."""
        return f"{self.artifacts_prefix}publish/receipt.json"

    @property
    def inputs(self) -> str:
        """Artifacts bucket: what the run trains on and with, copied once and never rewritten."""
        return f"{self.artifacts_prefix}inputs/"

    def user_file(self, role: str, suffix: str) -> str:
        """Intake's copy of a user's file (``rewards``, ``processor``, ``chat_template``)."""
        return f"{self.inputs}{role}{suffix}"

    @property
    def data(self) -> str:
        """The pinned datasets' files, staged from the Hub at their commits before training."""
        return f"{self.inputs}data/"

    def data_split(self, role: str) -> str:
        """One staged split (``train`` or ``eval``): its parquet files, in the order train_rl reads."""
        return f"{self.data}{role}/"

    def data_file(self, role: str, index: int) -> str:
        return f"{self.data_split(role)}{index:05d}.parquet"

    @property
    def data_manifest(self) -> str:
        """Written last by the staging step: every staged file with its source and sha256."""
        return f"{self.data}{DATA_MANIFEST}"

    def uri(self, name: str) -> str:
        return gs(self.bucket, name)


@dataclass(frozen=True)
class ConversionCache:
    """Converted checkpoints, shared by every run of the same (repo, sha, flags, image).

    The attempt directories are in the artifacts bucket (``bucket``: the convert Job writes them);
    ``ready`` is in the state bucket (only the control plane names the winner)."""

    bucket: str
    key: str
    scope: str = ""  # a team's conversions live under its own prefix (RunLayout.scope)

    @property
    def prefix(self) -> str:
        """State bucket: where READY.json names the winner."""
        return f"{CACHE_PREFIX}{self.key}/"

    @property
    def attempts_prefix(self) -> str:
        """Artifacts bucket: the conversion attempts of this key."""
        return f"{team_prefix(self.scope)}{CACHE_PREFIX}{self.key}/"

    @property
    def ready(self) -> str:
        """Written once, with if_generation_match=0, naming the attempt directory that finished;
        state bucket (the stage function writes it after checking the attempt's commit marker)."""
        return f"{self.prefix}READY.json"

    def attempt_dir(self, run_id: str, attempt: int) -> str:
        """Each conversion attempt writes its own directory: no two writers share one (artifacts bucket)."""
        return f"{self.attempts_prefix}{run_id}-a{attempt}/"

    def uri(self, name: str) -> str:
        return gs(self.bucket, name)


def converted_step_commit(attempt_dir: str) -> str:
    return f"{attempt_dir}{CONVERTED_STEP}/{COMMIT_MARKER}"


def pinned_source_dir(attempt_dir: str) -> str:
    """The HF repo's tokenizer and config files at the pinned sha, copied by the convert Job.

    They sit beside the converted checkpoint, in the attempt directory, because they belong to the
    same (repo, sha): a run whose conversion is a cache hit reads another run's copy, exactly as it
    loads that run's checkpoint. Train (``tokenizer_path``) and export (``--hf_model_path``) read
    them from here instead of the Hub's default branch. Orbax ignores the directory: its name is
    not a step.
    """
    return f"{attempt_dir}{PINNED_SOURCE_DIR}"


def pinned_manifest(attempt_dir: str) -> str:
    return f"{pinned_source_dir(attempt_dir)}{PINNED_MANIFEST}"


def converted_items(attempt_dir: str) -> str:
    """What training loads (``load_parameters_path``): step 0's ``items`` of the conversion."""
    return f"{attempt_dir}{CONVERTED_STEP}/items/"


def conversion_cache_key(
    hf_repo: str, hf_sha: str, conversion_flags: Sequence[str], image: str, *, scope: str = ""
) -> str:
    """Hash of everything that determines the converted bytes; paths and the token are excluded.
    ``scope``: whose cache it is (a team's; core.teams), hashed only when set, so the deployment's
    one team keeps its keys."""
    fields: dict[str, object] = {
        "hf_repo": hf_repo,
        "sha": hf_sha,
        "flags": list(conversion_flags),
        "image": image,
    }
    if scope:
        fields["scope"] = scope
        # Where its attempts live (teams/<team>/, ConversionCache.scope): a READY.json written when
        # a team's conversions lived under cache/maxtext/ names a directory outside the team's
        # prefix, which ready_conversion refuses; a key of its own makes a fresh one instead of a
        # key no conversion can ever be published under again.
        fields["prefix"] = team_prefix(scope)
    material = json.dumps(
        fields,
        sort_keys=True,
        separators=(",", ":"),
    )
    return "c" + hashlib.sha256(material.encode()).hexdigest()[:24]


def checkpoint_steps(num_batches: int, period: int | None = None) -> list[int]:
    """Steps at which train_rl commits a checkpoint: every ``period`` steps, and the forced final save."""
    period = period or presets.MAXTEXT_CHECKPOINT_PERIOD
    steps = list(range(period, num_batches + 1, period))
    if not steps or steps[-1] != num_batches:
        steps.append(num_batches)
    return steps


def final_step(num_batches: int) -> int:
    """Deprecated: right only with rl.yml's defaults; use :func:`final_step_for` (the request)."""
    return num_batches


def final_step_for(req: Request) -> int:
    """The step a run with plentiful data ends at, from the effective config (overrides and
    batch_size included; ``core.steps``). A run whose data ends earlier ends earlier, cleanly:
    once training ended, its actual final step is the ledger's ``lineage.final_step``."""
    return step_rules.final_step(req)


@dataclass(frozen=True)
class Completeness:
    complete: bool
    reason: str
    missing: tuple[str, ...] = ()
    # export: the sha256 of the manifest bytes this rule was judged on. The control plane records
    # it when export ends and hands it to publish (``--manifest-sha256``), so a workload that
    # rewrites the manifest afterwards (to list a file it planted) is refused (publisher.exported).
    manifest_sha256: str | None = None


def convert_complete(names: Iterable[str], attempt_dir: str) -> Completeness:
    marker = converted_step_commit(attempt_dir)
    if marker in set(names):
        return Completeness(True, "converted checkpoint committed")
    return Completeness(False, f"{marker} not written yet", (marker,))


def train_complete(names: Iterable[str], layout: RunLayout, num_batches: int) -> Completeness:
    marker = layout.step_commit(final_step(num_batches))
    if marker in set(names):
        return Completeness(True, f"final step {final_step(num_batches)} committed")
    return Completeness(False, f"{marker} not written yet", (marker,))


def train_complete_for(
    names: Iterable[str], layout: RunLayout, req: Request, final: int | None = None
) -> Completeness:
    """Training's output is complete when its final step is committed: ``final``, the step training
    actually ended at once it ended (``lineage.final_step``), else the config's."""
    final = final if final is not None else final_step_for(req)
    marker = layout.step_commit(final)
    if marker in set(names):
        return Completeness(True, f"final step {final} committed")
    return Completeness(False, f"{marker} not written yet", (marker,))


def committed_steps(names: Iterable[str], layout: RunLayout) -> list[int]:
    """Steps whose step-level ``actor/<s>/commit_success.txt`` exists, ascending.

    Orbax writes ``actor/<s>/model_params/commit_success.txt`` (and the optimizer state's) before
    the step's own marker; an item-level marker alone is a step still being written.
    """
    found = set()
    for name in names:
        if not name.startswith(layout.checkpoints):
            continue
        head, sep, rest = name[len(layout.checkpoints) :].partition("/")
        if sep and rest == COMMIT_MARKER and head.isdigit() and head == str(int(head)):
            found.add(int(head))
    return sorted(found)


def latest_committed_step(names: Iterable[str], layout: RunLayout) -> int | None:
    """The newest committed step (step-level marker only): where a retried training attempt resumes."""
    steps_found = committed_steps(names, layout)
    return steps_found[-1] if steps_found else None


@dataclass(frozen=True)
class ExportedFile:
    """One file of the export manifest: its path under the export directory, size and sha256."""

    path: str
    size: int
    sha256: str


# What a path in the export manifest may look like: segments of letters, digits, ``.``, ``_`` and
# ``-`` (every name to_huggingface writes: tokenizer, config, shards, index), none of them ``.``
# or ``..``. Anything else is not a name the export wrote, whoever put it there.
EXPORTED_PATH_PATTERN = r"[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*"
_EXPORTED_PATH = re.compile(EXPORTED_PATH_PATTERN)
_SHA256 = re.compile(r"[0-9a-f]{64}")


def exported_path_ok(path: object) -> TypeGuard[str]:
    return (
        isinstance(path, str)
        and _EXPORTED_PATH.fullmatch(path) is not None
        and not any(part in (".", "..") for part in path.split("/"))
    )


def export_manifest_files(document: Any) -> tuple[ExportedFile, ...]:
    """The files an export manifest lists; ``ValueError`` saying what is wrong with any other
    document (the manifest lies where workloads write, so it is read as untrusted input)."""
    files = document.get("files") if isinstance(document, dict) else None
    if not isinstance(files, list) or not files:
        raise ValueError("it lists no files")
    out: list[ExportedFile] = []
    seen: set[str] = set()
    for entry in files:
        if not isinstance(entry, dict):
            raise ValueError("an entry is not an object")
        path, size, digest = entry.get("path"), entry.get("size"), entry.get("sha256")
        if not exported_path_ok(path) or path == EXPORT_MANIFEST:
            raise ValueError(f"{str(path)[:200]!r} is not a file name export writes")
        if path in seen:
            raise ValueError(f"{path} is listed twice")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError(f"{path}: the size is not a byte count")
        if not isinstance(digest, str) or _SHA256.fullmatch(digest) is None:
            raise ValueError(f"{path}: the sha256 is not 64 hex digits")
        seen.add(path)
        out.append(ExportedFile(path, size, digest))
    return tuple(out)


def export_complete(sizes: Mapping[str, int], hf_dir: str, manifest: Any, index: Any = None) -> Completeness:
    """The export is complete when its manifest (written last) is readable, every file it lists
    is in the bucket with the listed size, and the files are a model: the index and every shard
    its weight_map names, or one unsharded file and its config.

    ``sizes``: every object under ``hf_dir`` with its size; ``manifest``: the parsed manifest, or
    None when there is none; ``index``: the parsed ``model.safetensors.index.json`` when the
    manifest lists one (``{}`` when it could not be read)."""
    marker = hf_dir + EXPORT_MANIFEST
    if manifest is None:
        return Completeness(False, f"{EXPORT_MANIFEST} not written yet", (marker,))
    try:
        files = export_manifest_files(manifest)
    except ValueError as exc:
        return Completeness(False, f"{EXPORT_MANIFEST} is not an export manifest: {exc}", (marker,))
    wrong = tuple(hf_dir + f.path for f in files if sizes.get(hf_dir + f.path) != f.size)
    if wrong:
        return Completeness(
            False, f"{len(wrong)} of {len(files)} exported files missing or of another size", wrong
        )
    listed = {f.path for f in files}
    if HF_INDEX in listed:
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(weight_map, dict) or not weight_map:
            return Completeness(False, f"{HF_INDEX} has no weight_map", (hf_dir + HF_INDEX,))
        shards = sorted({str(f) for f in weight_map.values()})
        missing = tuple(hf_dir + s for s in shards if s not in listed)
        if missing:
            return Completeness(False, f"{len(missing)} of {len(shards)} shards missing", missing)
        return Completeness(True, f"manifest, index and all {len(shards)} shards present")
    missing = tuple(hf_dir + n for n in (HF_SINGLE, HF_CONFIG) if n not in listed)
    if missing:
        return Completeness(False, "the manifest lists no index and no complete single-file model", missing)
    return Completeness(True, "manifest, single-file model and config present")


# What the publisher program writes in its receipt once the commit is on the Hub (a new commit, or
# the one an earlier attempt made: rlpipe.publisher.program).
PUBLISHED_OUTCOMES = frozenset({"published", "already-published"})


def publish_complete(
    exported: Mapping[str, int],
    hf_dir: str,
    receipt: Mapping[str, Any] | None,
    repo: str,
    branch: str,
    run_id: str,
) -> Completeness:
    """Publish is done when the Job's receipt says this run pushed to this repo and branch, and
    lists every exported file with its size. ``exported``: the export manifest's files (object
    names under ``hf_dir``, each with the size export wrote), not whatever else the prefix holds."""
    if not receipt:
        return Completeness(False, "no publish receipt yet")
    if receipt.get("outcome") not in PUBLISHED_OUTCOMES or not receipt.get("commit"):
        return Completeness(False, f"the publish receipt says {receipt.get('outcome')!r}, not published")
    if (receipt.get("repo"), receipt.get("branch"), receipt.get("run_id")) != (repo, branch, run_id):
        return Completeness(False, "the publish receipt is for another repo, branch or run")
    files = receipt.get("files") or {}
    wrong = tuple(
        name[len(hf_dir) :] for name, size in exported.items() if files.get(name[len(hf_dir) :]) != size
    )
    if not exported:
        return Completeness(False, "no exported file to compare with")
    if wrong:
        return Completeness(
            False, f"{len(wrong)} exported file(s) missing or of another size on the Hub", wrong
        )
    return Completeness(
        True, f"commit {receipt['commit']} on {repo}@{branch} holds all {len(exported)} files"
    )
