"""What the buckets hold for a stage: its completeness, and the shared conversion cache.

Why apart from ``stage``: these are the artifact half of every status answer (the cluster's
verdict is the other half), and the conversion cache is shared between runs; both read the
buckets only through ``core.layout``'s rules.

Completeness is read from the artifacts bucket, where the workloads write. The conversion cache's
``READY.json`` lives in the state bucket, which no workload can write: only this module (in the
stage function, after the attempt's commit marker was seen) names the attempt every later run of
the key loads, so a workload cannot point a cache key at a checkpoint of its own.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, assert_never

from rlpipe.control.adapters import blobstore
from rlpipe.control.lifecycle.ledger import Ledger
from rlpipe.core import layout
from rlpipe.core.identity import Stage
from rlpipe.core.manifests import RenderContext, conversion_cache
from rlpipe.core.request import Request
from rlpipe.core.runs import launch_record
from rlpipe.core.runs.record import RunRecord, now


def ready_conversion(state: blobstore.BlobStore, cache: layout.ConversionCache) -> str | None:
    """The finished conversion attempt directory named by READY.json (state bucket), if any."""
    try:
        data, _ = state.read_json(cache.ready)
    except blobstore.NotFound:
        return None
    directory = data.get("attempt_dir") if isinstance(data, dict) else None
    return directory if isinstance(directory, str) and directory.startswith(cache.attempts_prefix) else None


def stage_complete(
    artifacts: blobstore.BlobStore, req: Request, ctx: RenderContext, stage: Stage, attempt: int
) -> layout.Completeness:
    """The stage's done rule (docs/design.md#stages-and-what-done-means) applied to what the bucket lists now.

    Train's final step is ``ctx.final_step`` (the ledger's ``lineage.final_step``: the step
    training actually ended at once it ended, which the data can make lower than the config's),
    else the config's."""
    run = layout.RunLayout(artifacts.bucket_name, ctx.run_id, scope=ctx.cache_scope)
    if stage == "convert":
        directory = conversion_cache(req, ctx).attempt_dir(ctx.run_id, attempt)
        return layout.convert_complete(artifacts.list(directory + "0/"), directory)
    if stage == "train":
        final = ctx.final_step if ctx.final_step is not None else layout.final_step_for(req)
        return layout.train_complete_for(artifacts.list(run.step_dir(final)), run, req, final)
    if stage == "publish":
        if req.publish is None:
            return layout.Completeness(False, "the request has no publish section")
        try:
            receipt = artifacts.read(run.publish_receipt).json()
        except (ValueError, blobstore.NotFound):
            receipt = None
        return layout.publish_complete(
            exported_files(artifacts, ctx.run_id, ctx.cache_scope),
            run.hf_dir,
            receipt,
            req.publish.repo,
            req.publish.branch,
            ctx.run_id,
        )
    if stage == "export":
        return export_completeness(artifacts, ctx.run_id, ctx.cache_scope)
    assert_never(stage)  # a new stage has its own done rule, never export's


def _json(artifacts: blobstore.BlobStore, name: str) -> Any:
    """An object's JSON; ``{}`` when it is not JSON or too large to be what the program wrote."""
    try:
        return artifacts.read(name).json()
    except (ValueError, blobstore.TooLarge):
        return {}


def export_completeness(artifacts: blobstore.BlobStore, run_id: str, scope: str = "") -> layout.Completeness:
    """The export's done rule (``layout.export_complete``) on what the bucket holds now: the
    manifest the export Job wrote last, the size of every object under the export's prefix, and
    the index when the manifest lists one. ``scope``: the run's team's (``RunLayout.scope``)."""
    run = layout.RunLayout(artifacts.bucket_name, run_id, scope=scope)
    sizes = artifacts.sizes(run.hf_dir)
    manifest = index = digest = None
    try:
        if run.export_manifest in sizes:
            blob = artifacts.read(run.export_manifest)
            digest = hashlib.sha256(blob.data).hexdigest()  # of the very bytes judged below
            try:
                manifest = blob.json()
            except ValueError:
                manifest = {}
        try:
            listed = {f.path for f in layout.export_manifest_files(manifest)}
        except ValueError:
            listed = set()
        if layout.HF_INDEX in listed:
            index = _json(artifacts, run.hf_dir + layout.HF_INDEX)
    except blobstore.NotFound:  # deleted between the listing and the read: read again next time
        return layout.Completeness(False, "the export changed while it was read", (run.export_manifest,))
    except blobstore.TooLarge:
        manifest = {}
    judged = layout.export_complete(sizes, run.hf_dir, manifest, index)
    return dataclasses.replace(judged, manifest_sha256=digest) if judged.complete else judged


def exported_files(artifacts: blobstore.BlobStore, run_id: str, scope: str = "") -> dict[str, int]:
    """Object name → size of every file the export manifest lists (what publish must have
    pushed); empty when there is no readable manifest."""
    run = layout.RunLayout(artifacts.bucket_name, run_id, scope=scope)
    try:
        files = layout.export_manifest_files(_json(artifacts, run.export_manifest))
    except (ValueError, blobstore.NotFound):
        return {}
    return {run.hf_dir + f.path: f.size for f in files}


def published_commit(artifacts: blobstore.BlobStore, run_id: str, scope: str = "") -> str | None:
    """The Hub commit the publish Job's receipt names (read once its done rule holds)."""
    try:
        receipt = artifacts.read(
            layout.RunLayout(artifacts.bucket_name, run_id, scope=scope).publish_receipt
        ).json()
    except (ValueError, blobstore.NotFound):
        return None
    commit = receipt.get("commit") if isinstance(receipt, dict) else None
    return commit if isinstance(commit, str) and commit else None


def publish_conversion(
    state: blobstore.BlobStore, ledger: Ledger, req: Request, ctx: RenderContext, attempt: int
) -> None:
    """First finished conversion of a key wins READY.json; everyone then loads the winner's.

    ``state`` is the state bucket's store; the attempt directory it names (and the converted URI
    recorded in the ledger) is in the artifacts bucket, ``ctx.bucket``."""
    cache = conversion_cache(req, ctx)
    mine = cache.attempt_dir(ctx.run_id, attempt)
    state.create(
        cache.ready, blobstore.dumps({"attempt_dir": mine, "run_id": ctx.run_id, "written_at": now()})
    )
    winner = ready_conversion(state, cache) or mine
    uri = layout.gs(cache.bucket, winner)

    ledger.edit(
        ctx.run_id, lambda r: launch_record.converted(r, uri), detail=lambda r: {"converted_uri": uri}
    )


def done_stages(
    artifacts: blobstore.BlobStore, record: RunRecord, req: Request, ctx: RenderContext
) -> set[str]:
    """Stages an earlier execution of this run finished, by their done rules (the bucket), not by
    the ledger's word: a promoted or retried run must not train, export or publish twice."""
    done: set[str] = set()
    stages: tuple[Stage, ...] = ("train", "export", "publish")
    for stage in stages:
        a = record.current_attempt(stage)
        if (
            a is not None
            and a.phase == "succeeded"
            and stage_complete(artifacts, req, ctx, stage, a.attempt).complete
        ):
            done.add(stage)
    return done
