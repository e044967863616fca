"""The request document: schema, preset merging, and validation a person can act on.

A request is YAML or JSON. Only ``model`` and ``hf_repo`` are required; every other value comes
from the named preset (see ``presets.py``) unless the request overrides it. Parsing never raises
anything but ``RequestInvalid``, which lists *every* problem found, each with the field path and
the fix, so a user fixes a request in one round trip.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
    field_validator,
)
from pydantic_core import PydanticCustomError

from rlpipe.core import presets, workarounds
from rlpipe.core.problems import Problem, RequestInvalid

MAX_DOCUMENT_BYTES = 256 * 1024

_SHELL_UNSAFE = re.compile(r"[\x00-\x1f\x7f;&|`$<>\\!*?(){}\[\]'\"~#]")
_SHELL_UNSAFE_CONFIG = re.compile(r"[\x00-\x1f\x7f;&|`$<>\\!*?~#]")  # allows JSON/Python-literal punctuation
_TOKEN_LIKE = re.compile(r"\bhf_[A-Za-z0-9]{30,}\b")
_SECRET_KEY = re.compile(r"(^|[_-])(token|password|passwd|secret|credentials?|api[_-]?key)($|[_-])", re.IGNORECASE)
_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
_IMAGE = re.compile(
    r"^(?P<repo>[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)+)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?(?:@(?P<digest>sha256:[a-f0-9]{64}))?$"
)
_SHA = re.compile(r"^[0-9a-f]{40}$")
_BRANCH = re.compile(r"^(?!-)(?!.*\.\.)(?!.*//)[A-Za-z0-9._/-]{1,100}(?<![./])$")
_HF_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")
_MODEL = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
_TOPIC = re.compile(r"^(projects/[a-z][a-z0-9-]{4,28}[a-z0-9]/topics/)?[A-Za-z][A-Za-z0-9._~%+-]{2,254}$")
_DURATION = re.compile(r"^\s*(\d+)\s*(s|m|h|d)?\s*$")
_QUANTITY = r"^[0-9]+(\.[0-9]+)?(m|k|Ki|Mi|Gi|Ti|M|G|T)?$"


def _custom(problem: str, fix: str) -> PydanticCustomError:
    """A validation error carrying its own fix text, which ``Problem`` extraction picks up."""
    return PydanticCustomError("rlpipe", problem, {"fix": fix})


def _parse_duration(value: Any) -> Any:
    if isinstance(value, str):
        m = _DURATION.match(value)
        if not m:
            raise _custom(
                f"{value!r} is not a duration", "write whole seconds (7200) or a number with s, m, h or d ('2h')"
            )
        scale = {"s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}[m.group(2)]
        return int(m.group(1)) * scale
    return value


Seconds = Annotated[
    int,
    BeforeValidator(_parse_duration),
    Field(ge=60, le=30 * 86400),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 60, "maximum": 2592000},
                {"type": "string", "pattern": r"^\s*\d+\s*(s|m|h|d)?\s*$"},
            ],
            "description": "seconds, or a duration such as '90m', '2h', '1d'",
        }
    ),
]
Quantity = Annotated[str, Field(pattern=_QUANTITY)]
DnsLabel = Annotated[str, Field(pattern=_DNS_LABEL, max_length=63)]
EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=128)]
EnvValue = Annotated[str, Field(max_length=1024)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=False)


def _check_image(value: str) -> str:
    m = _IMAGE.match(value)
    if not m:
        raise _custom(
            f"{value!r} is not a container image reference",
            "use REGISTRY/PATH:TAG or REGISTRY/PATH@sha256:DIGEST",
        )
    if not m.group("tag") and not m.group("digest"):
        raise _custom(f"{value!r} has no tag or digest", "pin the image: add :TAG or @sha256:DIGEST")
    if m.group("tag") == "latest" and not m.group("digest"):
        raise _custom(f"{value!r} uses the moving tag 'latest'", "pin a release tag or a sha256 digest")
    return value


Image = Annotated[str, BeforeValidator(lambda v: _check_image(v) if isinstance(v, str) else v)]


class TpuSpec(_Strict):
    """The slice the training JobSet runs on (and convert/export in ``tpu-slice`` placement)."""

    type: Literal["v6e-16", "v6e-32", "v6e-64", "v6e-128", "v6e-256"]
    topology: Annotated[str, Field(pattern=r"^[0-9]+x[0-9]+$")]
    slices: Annotated[int, Field(ge=1, le=64)]
    reservation: Annotated[str, Field(pattern=_DNS_LABEL, max_length=63)] | None
    queue: DnsLabel = Field(description="Kueue LocalQueue name in the workload namespace")


class CpuJobSpec(_Strict):
    """The single CPU pod that runs conversion and export in ``cpu`` placement."""

    node_pool: DnsLabel
    cpu: Quantity
    memory: Quantity
    ephemeral_storage: Quantity | None


class SecretRef(_Strict):
    """Where the HF token lives in the cluster; the value itself is never in a request."""

    name: Annotated[str, Field(pattern=_DNS_SUBDOMAIN, max_length=253)]
    key: Annotated[str, Field(pattern=r"^[-._a-zA-Z0-9]{1,253}$")]


class PathwaysEnv(_Strict):
    workload: dict[EnvName, EnvValue]
    proxy: dict[EnvName, EnvValue]
    resource_manager: dict[EnvName, EnvValue]
    worker: dict[EnvName, EnvValue]


class PathwaysSpec(_Strict):
    proxy_image: Image
    server_image: Image
    worker_image: Image | None = Field(description="defaults to server_image")
    head_node_pool: DnsLabel
    ttl_seconds_after_finished: Annotated[int, Field(ge=0, le=30 * 86400)]
    env: PathwaysEnv


Scalar = bool | int | float | str


class TrainingSpec(_Strict):
    """Every hyper-parameter of the tutorials' ``train_rl`` command; ``None`` = not passed."""

    command_env: dict[EnvName, EnvValue] = Field(
        description="variables set for train_rl inside the container (the tutorials set them inline)"
    )
    workarounds: list[str] = Field(description="in-container patches, as name@version from the registry")
    scan_layers: bool
    data_template_path: Annotated[str, Field(max_length=512)] | None
    num_batches: Annotated[int, Field(ge=1, le=1_000_000)]
    batch_size: Annotated[int, Field(ge=1, le=65536)]
    train_micro_batch_size: Annotated[int, Field(ge=1, le=65536)] | None
    max_target_length: Annotated[int, Field(ge=1, le=1_048_576)] | None
    max_prefill_predict_length: Annotated[int, Field(ge=1, le=1_048_576)] | None
    mu_dtype: Literal["bfloat16", "float32"] | None
    grad_dtype: Literal["bfloat16", "float32"] | None
    rollout_tensor_parallelism: Annotated[int, Field(ge=1, le=4096)]
    rollout_expert_parallelism: Annotated[int, Field(ge=1, le=4096)]
    trainer_devices_fraction: Annotated[float, Field(gt=0, le=1)]
    sampler_devices_fraction: Annotated[float, Field(gt=0, le=1)]
    tokenizer_path: Annotated[str, Field(max_length=512)] | None = Field(description="defaults to hf_repo")
    ici_tensor_parallelism: Annotated[int, Field(ge=1, le=4096)]
    ici_expert_parallelism: Annotated[int, Field(ge=1, le=4096)]
    ici_fsdp_parallelism: Annotated[int, Field(ge=-1, le=4096)] | None = Field(description="-1 = fill")
    hbm_utilization_vllm: Annotated[float, Field(gt=0, le=1)]
    remat_policy: Literal["full", "minimal", "save_dot_except_mlpwi", "save_dot_except_mlp", "save_qkv_proj",
                          "qkv_proj_offloaded", "minimal_offloaded", "custom"]
    async_scheduling: bool
    allow_split_physical_axes: bool
    ragged_gather_reduce_fallback: bool
    enable_dp_attention: bool | None
    decode_sampling_temperature: Annotated[float, Field(ge=0, le=10)] | None
    decode_sampling_top_k: Annotated[int, Field(ge=0, le=100000)] | None
    decode_sampling_nucleus_p: Annotated[float, Field(gt=0, le=1)] | None
    learning_rate: Annotated[float, Field(gt=0, le=1)] | None
    learning_rate_schedule_steps: Annotated[int, Field(ge=1, le=10_000_000)] | None
    num_generations: Annotated[int, Field(ge=1, le=1024)] | None = Field(description="rl.num_generations")
    reshard_chunk_size: Annotated[int, Field(ge=1, le=1024)] | None = Field(description="rl.reshard_chunk_size")
    debug: bool | None
    checkpoint_period: Annotated[int, Field(ge=1, le=1_000_000)] | None = Field(
        description="MaxText's default (50) when unset"
    )
    vllm_hf_overrides: Annotated[str, Field(max_length=2048)]
    vllm_maxtext_config: dict[Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_]*$")], Scalar] = Field(
        description="maxtext_config of vllm_additional_config; model_name is added from `model`"
    )

    @field_validator("workarounds")
    @classmethod
    def _known_workarounds(cls, refs: list[str]) -> list[str]:
        unknown = [r for r in refs if not workarounds.is_valid_ref(r)]
        if unknown:
            raise _custom(
                f"unknown workaround(s) {', '.join(map(repr, unknown))}",
                f"use entries from the registry: {', '.join(sorted(workarounds.REGISTRY))}",
            )
        return refs

    @field_validator("data_template_path", "tokenizer_path", "vllm_hf_overrides")
    @classmethod
    def _no_shell_metachars(cls, value: str | None, info: Any) -> str | None:
        pattern = _SHELL_UNSAFE_CONFIG if info.field_name == "vllm_hf_overrides" else _SHELL_UNSAFE
        if value is not None and pattern.search(value):
            raise _custom(
                f"{value!r} contains a shell metacharacter or control character",
                "remove quotes, $, `, ;, |, &, <, >, backslashes and newlines",
            )
        return value

    @field_validator("vllm_maxtext_config")
    @classmethod
    def _config_values_plain(cls, value: dict[str, Scalar]) -> dict[str, Scalar]:
        for key, item in value.items():
            if isinstance(item, str) and (_SHELL_UNSAFE.search(item) or len(item) > 256):
                raise _custom(f"value of {key!r} is not a plain word", "use letters, digits, '.', '_' or '-'")
        if "model_name" in value:
            raise _custom("model_name is set from the request's `model`", "remove model_name from this map")
        return value


class Budgets(_Strict):
    """Retries allowed per failure class (DESIGN §6); `permanent` is never retried."""

    preempted: Annotated[int, Field(ge=0, le=50)]
    capacity: Annotated[int, Field(ge=0, le=50)]
    resources: Annotated[int, Field(ge=0, le=5)]
    transient: Annotated[int, Field(ge=0, le=20)]


class Backoff(_Strict):
    initial_delay: Annotated[float, Field(ge=1, le=3600)]
    max_delay: Annotated[float, Field(ge=1, le=86400)]
    multiplier: Annotated[float, Field(ge=1, le=10)]


class RetrySpec(_Strict):
    budgets: Budgets
    max_retries: Annotated[int, Field(ge=0, le=60)] = Field(description="total cap over all classes, per stage")
    backoff: Backoff
    retryable_exit_codes: list[Annotated[int, Field(ge=1, le=255)]] = Field(
        description="program exit codes classified `transient` instead of `permanent`"
    )


class Timeouts(_Strict):
    convert: Seconds
    train: Seconds
    export: Seconds
    queued: Seconds = Field(description="how long a workload may wait for admission before it counts as `capacity`")


class Request(_Strict):
    """A complete, normalized request: what the ledger stores and the manifests are built from."""

    model: Annotated[str, Field(pattern=_MODEL.pattern)] = Field(
        description="MaxText model name, e.g. gemma4-26b"
    )
    hf_repo: Annotated[str, Field(pattern=_HF_REPO.pattern)] = Field(
        description="Hugging Face repository, e.g. google/gemma-4-26b-a4b-it"
    )
    hf_revision: str = Field(description="branch name, or a 40-hex commit sha")
    request_id: Annotated[str, Field(pattern=r"^[a-z0-9-]{1,40}$")] | None = Field(
        default=None, description="client idempotency key: the same id never starts a second run"
    )
    preset: Literal["v6e-32", "v6e-64"] = presets.DEFAULT_PRESET
    tpu: TpuSpec
    image: Image
    placement: Literal["cpu", "tpu-slice"] = Field(description="where convert and export run")
    cpu_job: CpuJobSpec
    pathways: PathwaysSpec
    hf_token_secret: SecretRef
    training: TrainingSpec
    maxtext_overrides: dict[str, Scalar] = Field(
        description="extra train_rl key=value arguments (keys ^[a-z_][a-z0-9_.]*$; plain values)"
    )
    retry: RetrySpec
    timeouts: Timeouts
    notify: Annotated[str, Field(pattern=_TOPIC.pattern)] | None = Field(
        description="Pub/Sub topic for status messages"
    )
    labels: dict[str, str]

    @field_validator("hf_revision")
    @classmethod
    def _revision(cls, value: str) -> str:
        if _SHA.match(value) or (_BRANCH.match(value) and not re.fullmatch(r"[0-9a-fA-F]{40}", value)):
            return value
        raise _custom(
            f"{value!r} is neither a branch name nor a 40-hex commit sha",
            "use a branch such as 'main', or the full lowercase commit sha",
        )


# Keys the pipeline itself controls, and typed fields that must not be set through overrides.
CONTROLLED_ARGS = frozenset(
    {"run_name", "base_output_directory", "load_parameters_path", "hf_access_token", "model_name"}
)
TYPED_OVERRIDE_KEYS = {
    **{name: f"training.{name}" for name in TrainingSpec.model_fields if name not in (
        "command_env", "workarounds", "num_generations", "reshard_chunk_size", "vllm_maxtext_config")},
    "rl.num_generations": "training.num_generations",
    "rl.reshard_chunk_size": "training.reshard_chunk_size",
    "vllm_additional_config": "training.vllm_maxtext_config",
}


def parse_document(data: bytes | str, *, source: str = "request") -> dict[str, Any]:
    """Bytes → a mapping, rejecting what YAML would silently accept (duplicate keys, aliases)."""
    if isinstance(data, bytes):
        if len(data) > MAX_DOCUMENT_BYTES:
            raise RequestInvalid(
                [Problem("", f"{source} is {len(data)} bytes", f"keep requests under {MAX_DOCUMENT_BYTES} bytes")]
            )
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise RequestInvalid(
                [Problem("", f"{source} is not UTF-8 text", "save the request as UTF-8 JSON or YAML")]
            ) from None
    else:
        text = data
    if not text.strip():
        raise RequestInvalid([Problem("", f"{source} is empty", "write a JSON or YAML mapping with model and hf_repo")])
    if "\x00" in text:
        raise RequestInvalid([Problem("", f"{source} contains NUL bytes", "save the request as JSON or YAML text")])
    doc = _parse_json(text, source) if source.endswith(".json") else _parse_yaml(text, source)
    if not isinstance(doc, dict):
        raise RequestInvalid(
            [Problem("", f"{source} is a {type(doc).__name__}, not a mapping", "write a mapping: `model: ...`")]
        )
    return doc


def _parse_json(text: str, source: str) -> Any:
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                raise ValueError(f"duplicate key {key!r}")
            out[key] = value
        return out

    try:
        return json.loads(text, object_pairs_hook=pairs)
    except json.JSONDecodeError as exc:
        raise RequestInvalid(
            [Problem("", f"{source} is not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}", "fix the syntax")]
        ) from None
    except ValueError as exc:
        raise RequestInvalid([Problem("", f"{source}: {exc}", "keep one value per key")]) from None
    except RecursionError:
        raise RequestInvalid([Problem("", f"{source} is nested too deeply", "flatten the document")]) from None


def _parse_yaml(text: str, source: str) -> Any:
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise RequestInvalid(
            [Problem("", f"{source} is not valid JSON or YAML{at}: {problem}", "fix the syntax")]
        ) from None
    except RecursionError:
        raise RequestInvalid([Problem("", f"{source} is nested too deeply", "flatten the document")]) from None


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys and anchors/aliases (billion-laughs, silent overwrite)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.constructor.ConstructorError(
                None, None, "aliases (*name) are not allowed in requests", event.start_mark
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:
                raise yaml.constructor.ConstructorError(
                    None, None, "mapping keys must be plain strings", key_node.start_mark
                ) from None
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_request(data: bytes | str, *, source: str = "request") -> Request:
    """Parse, merge onto the preset, validate. Raises only ``RequestInvalid``."""
    return validate_request(parse_document(data, source=source))


def validate_request(doc: Any) -> Request:
    """Validate a decoded document (from a file, a message or a watch template)."""
    from rlpipe.core.request import checks

    if not isinstance(doc, dict):
        raise RequestInvalid([Problem("", "the request is not a mapping", "write a mapping: `model: ...`")])
    problems = list(_secret_problems(doc))
    preset = doc.get("preset", presets.DEFAULT_PRESET)
    if not isinstance(preset, str) or preset not in presets.PRESET_NAMES:
        problems.append(
            Problem("preset", f"unknown preset {preset!r}", f"use one of: {', '.join(presets.PRESET_NAMES)}")
        )
        preset = presets.DEFAULT_PRESET
    merged, merge_problems = _merge(presets.preset_defaults(preset), doc, ())
    problems.extend(merge_problems)
    try:
        request = Request.model_validate(merged)
    except ValidationError as exc:
        reported = {p.path for p in problems}
        problems.extend(p for p in _problems_from_pydantic(exc) if p.path not in reported)
        # Cross-field checks still run on the values that did parse, so one answer lists everything.
        problems.extend(checks.cross_field_problems(merged))
        raise RequestInvalid(_dedupe(problems)) from None
    problems.extend(checks.cross_field_problems(request.model_dump(mode="python")))
    if problems:
        raise RequestInvalid(_dedupe(problems))
    return request


def _dedupe(problems: list[Problem]) -> list[Problem]:
    return list(dict.fromkeys(problems))


def _merge(base: Any, override: Any, path: tuple[str, ...]) -> tuple[Any, list[Problem]]:
    """Deep-merge a request over preset defaults: mappings merge, everything else replaces."""
    if not isinstance(override, dict) or not isinstance(base, dict):
        return override, []
    out = dict(base)
    problems: list[Problem] = []
    for key, value in override.items():
        if not isinstance(key, str):
            where = ".".join(path)
            problems.append(Problem(where, f"key {key!r} is not a string", "quote the key"))
            continue
        if key in base and isinstance(base[key], dict) and isinstance(value, dict) and key not in _REPLACED_MAPS:
            out[key], sub = _merge(base[key], value, (*path, key))
            problems.extend(sub)
        else:
            out[key] = value
    return out, problems


# Maps a request replaces wholesale rather than merging into the preset's.
_REPLACED_MAPS = frozenset({"labels"})


def _secret_problems(doc: Any, path: tuple[str, ...] = ()) -> list[Problem]:
    """Tokens never travel in a request: reject keys and values that look like credentials."""
    found: list[Problem] = []
    if isinstance(doc, dict):
        for key, value in doc.items():
            sub = (*path, str(key))
            if isinstance(key, str) and _SECRET_KEY.search(key) and sub != ("hf_token_secret",) and path[:1] != (
                "hf_token_secret",
            ):
                found.append(
                    Problem(
                        ".".join(sub),
                        "secrets are never accepted in a request",
                        "remove it; the HF token is read from the Kubernetes Secret named in hf_token_secret",
                    )
                )
                continue
            found.extend(_secret_problems(value, sub))
    elif isinstance(doc, list):
        for i, item in enumerate(doc):
            found.extend(_secret_problems(item, (*path, str(i))))
    elif isinstance(doc, str) and _TOKEN_LIKE.search(doc):
        found.append(
            Problem(
                ".".join(path),
                "this value looks like a Hugging Face token",
                "remove it and revoke the token; the pipeline reads the token from a Kubernetes Secret",
            )
        )
    return found


_FIXES = {
    "missing": "add this field",
    "string_type": "write a string (quote the value in YAML)",
    "int_type": "write a whole number",
    "int_parsing": "write a whole number",
    "int_from_float": "write a whole number",
    "float_type": "write a number",
    "float_parsing": "write a number",
    "finite_number": "write a finite number",
    "bool_type": "write true or false",
    "bool_parsing": "write true or false",
    "dict_type": "write a mapping",
    "list_type": "write a list",
    "string_pattern_mismatch": "match the pattern shown",
    "string_too_long": "shorten the value",
    "string_too_short": "give a non-empty value",
    "greater_than_equal": "raise the value",
    "greater_than": "raise the value",
    "less_than_equal": "lower the value",
    "less_than": "lower the value",
}


def _problems_from_pydantic(exc: ValidationError) -> list[Problem]:
    problems = []
    for err in exc.errors(include_url=False):
        loc = err["loc"]
        path = _path(loc)
        kind = err["type"]
        ctx = err.get("ctx") or {}
        if kind == "rlpipe":
            problems.append(Problem(path, err["msg"], str(ctx.get("fix", ""))))
            continue
        if kind == "extra_forbidden":
            allowed = _allowed_keys(loc[:-1])
            hint = f"remove it; allowed here: {', '.join(allowed)}" if allowed else "remove it"
            close = _close_match(str(loc[-1]), allowed)
            if close:
                hint = f"did you mean {close!r}? otherwise {hint}"
            problems.append(Problem(path, f"unknown key {loc[-1]!r}", hint))
            continue
        if kind == "literal_error":
            problems.append(Problem(path, err["msg"], f"use one of: {ctx.get('expected', '')}"))
            continue
        # A union such as `int | None` reports one error per member; the None member's error is noise.
        if kind == "none_required":
            continue
        fix = _FIXES.get(kind, "correct the value")
        if kind == "string_pattern_mismatch":
            fix = f"match {ctx.get('pattern')}"
        problems.append(Problem(path, err["msg"], fix))
    return problems


def _path(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif str(item) in ("int", "float", "str", "bool", "constrained-int", "constrained-float", "constrained-str"):
            continue  # union member tags such as `int` in `training.x.int`
        elif str(item).startswith(("function-", "lax-or-strict")):
            continue
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts)


def _allowed_keys(loc: tuple[Any, ...]) -> list[str]:
    model: Any = Request
    for item in loc:
        fields = getattr(model, "model_fields", None)
        if fields is None or item not in fields:
            return []
        annotation = fields[item].annotation
        model = next(
            (a for a in (annotation, *getattr(annotation, "__args__", ())) if hasattr(a, "model_fields")), None
        )
    return sorted(getattr(model, "model_fields", {}) or {})


def _close_match(word: str, options: list[str]) -> str | None:
    import difflib

    matches = difflib.get_close_matches(word, options, n=1, cutoff=0.75)
    return matches[0] if matches else None


def json_schema() -> dict[str, Any]:
    """The schema of the request *document*: only model and hf_repo are required.

    The model itself requires every field because the preset fills them; the document a user
    writes may omit all but two, so ``required`` is lifted everywhere except at the top level.
    """
    schema = Request.model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://rlpipe.dev/schemas/request.schema.json"
    schema["title"] = "rlpipe request"
    schema["description"] = (
        "An RL post-training request. Unset fields take the preset's value (presets: "
        + ", ".join(presets.PRESET_NAMES)
        + "). Secrets are never part of a request."
    )
    for definition in schema.get("$defs", {}).values():
        definition.pop("required", None)
    schema["required"] = ["model", "hf_repo"]
    return schema
