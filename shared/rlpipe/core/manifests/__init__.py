"""Pure functions from (request, stage, attempt, context) to Kubernetes objects as dicts. No I/O."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, assert_never

from rlpipe.core import commands, export_manifest, identity, layout, pinning, staging, steps
from rlpipe.core.identity import Stage
from rlpipe.core.manifests.jobs import stage_job
from rlpipe.core.manifests.pathways import train_jobset
from rlpipe.core.manifests.publish import publish_args, publish_job
from rlpipe.core.request import Request
from rlpipe.core.teams import DEFAULT_TEAM

DEFAULT_NAMESPACE = "rlpipe"
DEFAULT_SERVICE_ACCOUNT = "rlpipe-workload"


@dataclass(frozen=True)
class RenderContext:
    """What a manifest needs beyond the request: where the run lives and what earlier stages made.

    ``hf_revision`` is the resolved commit sha once ``plan`` has pinned it (the CLI renders with the
    request's revision as given). ``converted_dir`` is the conversion attempt directory that training
    loads, which may belong to another run when the conversion cache hit.
    """

    run_id: str
    bucket: str
    namespace: str = DEFAULT_NAMESPACE
    service_account: str = DEFAULT_SERVICE_ACCOUNT
    hf_revision: str | None = None
    converted_dir: str | None = None
    # export: the step training ended at (the ledger's lineage.final_step), which the data can
    # make lower than the config's; None: the config's (steps.final_step)
    final_step: int | None = None
    # export: the step export.step chose (the ledger's lineage.exported_step, core.export_step);
    # None: final_step
    export_step: int | None = None
    # train: the pinned datasets (lineage.data) and the user's files (lineage.inputs) to stage
    data: Mapping[str, Any] | None = None
    inputs: Mapping[str, Any] | None = None
    model_card: str = ""  # publish: the card the control plane rendered (rlpipe.publisher.card)
    publisher_program: str = ""  # publish: the program's source (rlpipe.publisher.program)
    # publish: the digest of the export manifest the control plane judged (lineage)
    export_manifest_sha256: str | None = None
    # Whose conversions a run may reuse: a team's (core.teams) are its own, so a team never gets
    # another's converted weights of a repository only the other's token can read. "": the
    # deployment's one team, whose keys are as before.
    cache_scope: str = ""
    team: str = DEFAULT_TEAM  # the run's team (core.teams): the rlpipe.dev/team label on its objects

    @property
    def run(self) -> layout.RunLayout:
        """The run's names in the artifacts bucket (a team's under its own prefix: ``cache_scope``)."""
        return layout.RunLayout(self.bucket, self.run_id, scope=self.cache_scope)

    @property
    def pathways_scratch_uri(self) -> str:
        return layout.gs(self.bucket, layout.PATHWAYS_PREFIX)


@dataclass(frozen=True)
class StagePaths:
    """Inputs and outputs of one stage attempt, as gs:// URIs (also recorded as lineage)."""

    inputs: str | None
    output: str


def revision(req: Request, ctx: RenderContext) -> str:
    return ctx.hf_revision or req.hf_revision


def conversion_cache(req: Request, ctx: RenderContext) -> layout.ConversionCache:
    rev = revision(req, ctx)
    key = layout.conversion_cache_key(
        req.hf_repo, rev, commands.conversion_flags(req, rev), req.image, scope=ctx.cache_scope
    )
    return layout.ConversionCache(ctx.bucket, key, scope=ctx.cache_scope)


def converted_dir(req: Request, ctx: RenderContext) -> str:
    """The conversion directory training loads: the context's, else this run's first attempt."""
    return ctx.converted_dir or conversion_cache(req, ctx).attempt_dir(ctx.run_id, 1)


def request_stages(req: Request) -> tuple[Stage, ...]:
    """The stages this request runs, in order."""
    return identity.stages_for(publish=req.publish is not None)


def stage_paths(req: Request, ctx: RenderContext, stage: Stage, attempt: int) -> StagePaths:
    run = ctx.run
    if stage == "publish":
        return StagePaths(inputs=run.uri(run.hf_dir), output=run.uri(run.publish_receipt))
    if stage == "convert":
        out = conversion_cache(req, ctx).attempt_dir(ctx.run_id, attempt)
        return StagePaths(inputs=None, output=layout.gs(ctx.bucket, out))
    if stage == "train":
        items = layout.converted_items(converted_dir(req, ctx))
        return StagePaths(inputs=layout.gs(ctx.bucket, items), output=run.uri(run.trained_base))
    if stage == "export":
        final = ctx.final_step if ctx.final_step is not None else steps.final_step(req)
        if ctx.export_step is not None:
            final = ctx.export_step
        return StagePaths(inputs=run.uri(run.model_params(final)), output=run.uri(run.hf_dir))
    assert_never(stage)  # a new stage names its own paths, never export's


def pinned_source_uri(req: Request, ctx: RenderContext, stage: Stage, attempt: int) -> str:
    """Where the HF repo's source files at the pinned sha live for this stage attempt.

    Convert writes them into its own attempt directory; train and export read them from the
    conversion they load (this run's, or the cache hit's).
    """
    directory = (
        conversion_cache(req, ctx).attempt_dir(ctx.run_id, attempt)
        if stage == "convert"
        else converted_dir(req, ctx)
    )
    return layout.gs(ctx.bucket, layout.pinned_source_dir(directory))


def pinning_lineage(req: Request, ctx: RenderContext) -> dict[str, Any]:
    """What the run pins and how (for ``RunRecord.lineage``); ``ctx.hf_revision`` is plan's sha."""
    return pinning.lineage(
        req.hf_repo,
        revision(req, ctx),
        pinned_source_uri(req, ctx, "train", 1),
        req.training.tokenizer_path,
        resolved=ctx.hf_revision is not None,
    )


def render(req: Request, stage: Stage, attempt: int, ctx: RenderContext) -> dict[str, Any]:
    """The one Kubernetes object for a stage attempt."""
    if stage not in identity.STAGES:  # a caller's text (the CLI's --stage), before any path is made
        raise ValueError(f"unknown stage {stage!r}; stages are {', '.join(identity.STAGES)}")
    paths = stage_paths(req, ctx, stage, attempt)
    rev = revision(req, ctx)
    pinned = pinned_source_uri(req, ctx, stage, attempt)
    if stage == "convert":
        args = commands.convert_args(req, rev, paths.output)
        return stage_job(req, ctx, stage, attempt, args, revision=rev, pinned_uri=pinned)
    if stage == "train":
        assert paths.inputs is not None
        data_files = (
            staging.data_files_pattern(ctx.run, "train"),
            staging.data_files_pattern(ctx.run, "eval"),
        )
        args = commands.train_args(req, paths.output, paths.inputs, data_files)
        return train_jobset(req, ctx, attempt, args, pinned_uri=pinned)
    if stage == "export":
        assert paths.inputs is not None
        args = commands.export_args(req, paths.inputs)
        step_env = export_manifest.env(ctx.run)
        return stage_job(req, ctx, stage, attempt, args, revision=rev, pinned_uri=pinned, step_env=step_env)
    if stage == "publish":
        assert paths.inputs is not None
        run = ctx.run
        args = publish_args(req, ctx, paths.inputs, run.uri(run.export_manifest), paths.output)
        return publish_job(req, ctx, attempt, args, card=ctx.model_card, program=ctx.publisher_program)
    assert_never(stage)


def render_all(req: Request, ctx: RenderContext, attempt: int = 1) -> list[dict[str, Any]]:
    return [render(req, stage, attempt, ctx) for stage in request_stages(req)]
