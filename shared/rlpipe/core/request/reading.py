"""The request's MaxText arguments, read as MaxText reads them, and compared with what rlpipe means.

Why: every value of a request that becomes a ``key=value`` argument reaches MaxText through its
config reader, which is YAML (``core.maxtext.config_reader``). A check on the text is a check on
something MaxText never sees: ``'gs://…'``, ``" gs://…"`` and ``"\\"gs://…\\""`` all reach it as
``gs://…``, ``"0x"`` and 400 ``f``s as a 1,600-bit number, ``${oc.env:HF_TOKEN}`` as a token. So:

* every argument that carries request data (all of ``maxtext_overrides``; the typed fields,
  strings and numbers alike; the dataset's names; the vLLM maps) is rendered as
  ``core.commands`` renders it and read back; an argument MaxText reads as anything other than
  what rlpipe means (unquoted, trimmed, another type, ``none``, an interpolation, a missing
  marker) is refused, naming the field and the fix;
* the checks that follow (``gs://`` prefixes in ``policy``, bounds, step arithmetic) run on the
  values as read (``read_strings``), which are then the values as meant;
* the values MaxText takes as paths are named by its own keys (``READ_PATH_KEYS``,
  ``WRITE_PATH_KEYS``; ``path_values``), so ``policy`` can hold each to an allowlist of forms (a
  ``gs://`` path, a relative one where MaxText only reads) and a key MaxText writes to to the run's
  own prefix; ``CODE_KEYS`` are those it loads code or a deciding file from;
* an override's key is read too (``config_reader.key_path``: dots nest, case is kept), and the
  path is resolved against the keys MaxText defines (``core.maxtext.config_keys``): a key MaxText would
  refuse at start or drop silently is refused here with a "did you mean", a key the pipeline
  sets (``CONTROLLED_ARGS``) or a typed field sets is refused under whatever spelling reaches it.
  The same rule covers ``training.vllm_maxtext_config``, whose keys MaxText's vLLM adapter passes
  to ``pyconfig.initialize`` as keyword arguments (adapter.py:82-83, 160).

Values never reach a shell (``core.commands`` passes them as ``"$@"``), so no character is
refused for its own sake: what matters is what MaxText reads.

The renderings mirror ``core.commands`` (which imports this package's types, so it cannot be
imported from here); ``tests/core/request/test_request_reading.py`` holds that every argument read here is an
element of the argv ``core.commands`` renders, and that every request-carrying element is read.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from rlpipe.core.maxtext import config_keys, config_reader
from rlpipe.core.problems import Problem
from rlpipe.core.request.bounds import bound_problems, shown
from rlpipe.core.request.model import CONTROLLED_ARGS, TYPED_OVERRIDE_KEYS, Request, Scalar

MAPPING = object()  # an argument meant as a mapping literal (vllm_hf_overrides): any mapping
_TRAIN_KEYS = config_keys.for_program("train_rl")
_VLLM_KEYS = config_keys.for_program("vllm_maxtext_config")
# A typed field, by the MaxText field name every spelling of it reaches (``rl.num_generations``,
# ``num_generations`` routed into ``rl``, ``dataset.batch_size``): the request field to set instead.
_TYPED_BY_FIELD = {key.rsplit(".", 1)[-1]: field for key, field in TYPED_OVERRIDE_KEYS.items()}
# The MaxText key each typed training field is rendered as (the inverse of TYPED_OVERRIDE_KEYS).
_KEY_OF_TRAINING = {
    field.removeprefix("training."): key
    for key, field in TYPED_OVERRIDE_KEYS.items()
    if field.startswith("training.") and field != "training.vllm_maxtext_config"
}


@dataclass(frozen=True)
class Argument:
    """One ``key=value`` argument that carries request data: where it comes from in the request,
    its text, and the key path and value rlpipe means by it (``MAPPING``: any mapping)."""

    field: str
    text: str
    path: tuple[str, ...]
    meant: Any


def render(value: Scalar) -> str:
    """``core.commands.fmt``: booleans lower-case, floats without padded exponents."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        text = repr(value)
        if "e" in text:
            mantissa, exponent = text.split("e")
            sign = "-" if exponent.startswith("-") else ""
            text = f"{mantissa}e{sign}{exponent.lstrip('+-').lstrip('0') or '0'}"
        return text
    return str(value)


def _python_literal(value: Scalar) -> str:
    """``core.commands._python_literal``: strings in single quotes, the rest as ``render``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f"'{value}'"
    return render(value)


def vllm_maxtext_map(request: Request) -> dict[str, Scalar]:
    """The ``maxtext_config`` map rlpipe means: ``model_name`` from ``model``, then the request's."""
    return {"model_name": request.model, **request.training.vllm_maxtext_config}


def arguments(request: Request) -> list[Argument]:
    """Every argument of convert, train and export that carries request data."""
    t = request.training
    found = [Argument("model", f"model_name={request.model}", ("model_name",), request.model)]
    for field, key in _KEY_OF_TRAINING.items():  # scan_layers included (convert and export pass it too)
        value = getattr(t, field)
        if value is None:
            continue  # not passed, or the pipeline's own (the pinned tokenizer)
        if field == "data_template_path" and request.chat_template is not None:
            continue  # the staged chat template's path, the pipeline's
        path = tuple(key.split("."))
        if field == "vllm_hf_overrides":
            found.append(Argument(f"training.{field}", f"{key}={value}", path, MAPPING))
        else:
            found.append(Argument(f"training.{field}", f"{key}={render(value)}", path, value))
    literal = ", ".join(f"'{k}': {_python_literal(v)}" for k, v in vllm_maxtext_map(request).items())
    found.append(
        Argument(
            "training.vllm_maxtext_config",
            "vllm_additional_config={'maxtext_config': {" + literal + "}}",
            ("vllm_additional_config",),
            {"maxtext_config": vllm_maxtext_map(request)},
        )
    )
    found += list(_dataset_arguments(request))
    for key, value in request.maxtext_overrides.items():
        found.append(
            Argument(f"maxtext_overrides.{key}", f"{key}={render(value)}", _override_path(key), value)
        )
    return found


def _dataset_arguments(request: Request) -> Iterator[Argument]:
    d = request.dataset

    def arg(field: str, key: str, value: str) -> Argument:
        return Argument(field, f"{key}={value}", (key,), value)

    yield arg("dataset.repo", "dataset_name", d.repo)
    yield arg("dataset.eval_repo" if d.eval_repo else "dataset.repo", "eval_dataset_name", d.evaluated_repo)
    if d.subset is not None:
        yield arg("dataset.subset", "hf_subset", d.subset)
    yield arg("dataset.train_split", "train_split", d.train_split)
    yield arg("dataset.eval_split", "eval_split", d.eval_split)
    if request.rewards is not None:
        yield arg("rewards.functions", "reward_functions", ",".join(request.rewards.functions))


def _override_path(key: str) -> tuple[str, ...]:
    try:
        return config_reader.key_path(key)
    except config_reader.Unreadable:
        return tuple(key.split("."))  # the key's own problem is reported by override_key_problems


# ---- values -------------------------------------------------------------------------------------


def argument_problems(request: Request) -> Iterator[Problem]:
    """Every argument MaxText would read as something other than what rlpipe means, or could not
    read; every value as read that is out of bounds; every ``vllm_maxtext_config`` key MaxText's
    vLLM adapter would refuse, or that the pipeline sets."""
    for argument in arguments(request):
        try:
            reading = config_reader.read(argument.text)
        except config_reader.Unreadable as exc:
            yield Problem(argument.field, exc.problem, exc.fix)
            continue
        problem = _differs(argument, reading)
        if problem is not None:
            yield problem
            continue
        for out_of_bounds in bound_problems(reading.tree):
            yield Problem(argument.field, f"as MaxText reads it: {out_of_bounds.message}", out_of_bounds.fix)
    yield from _vllm_key_problems(request)


def _differs(argument: Argument, reading: config_reader.Reading) -> Problem | None:
    key, _, written = argument.text.partition("=")
    if argument.meant is MAPPING:
        try:
            value = reading.at(argument.path)
        except KeyError:
            value = reading.tree
        if isinstance(value, Mapping) and set(reading.tree) == {argument.path[0]}:
            return None
        return Problem(
            argument.field,
            f"MaxText reads {shown(written, 80)!r} as {_described(value)}, not as a mapping",
            "write a mapping literal such as {architectures: [MaxTextForCausalLM]}",
        )
    expected = _nest(argument.path, argument.meant)
    if same(reading.tree, expected):
        return None
    if (
        len(argument.path) == 1
        and argument.path[0] in config_reader.LIST_KEYS
        and isinstance(argument.meant, str)
        and same(reading.tree, _nest(argument.path, [argument.meant]))
    ):
        return None  # pyconfig's own coercion of one name into its list (pyconfig.py:216-236, 286-287)
    try:
        value = reading.at(argument.path)
    except KeyError:
        value = reading.tree
    meant, override = argument.meant, argument.field.startswith("maxtext_overrides.")
    if isinstance(meant, str) and value is None:
        fix = "MaxText would take no value here (its default): remove it, or write a value it reads as itself"
    elif isinstance(meant, str) and not isinstance(value, str):
        fix = (
            f"if {_described(value)} is what you mean, write it unquoted; otherwise choose another value"
            if override
            else "choose a value MaxText reads as that same text"
        )
    else:
        fix = (
            "write exactly the text MaxText should read: no quotes, no leading or trailing spaces, "
            "no ' #' comment, no line breaks"
        )
    return Problem(
        argument.field,
        f"MaxText's config reader (YAML, as OmegaConf reads {key}=…) reads {shown(written, 80)!r} as "
        f"{_described(value)}, not as what the request says",
        fix,
    )


def _described(value: Any) -> str:
    if value is None:
        return "no value (None)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"the number {value}" if value.bit_length() <= 64 else f"a {value.bit_length()}-bit number"
    if isinstance(value, float):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the text {shown(value, 80)!r}"
    kind = "a mapping" if isinstance(value, Mapping) else f"a {type(value).__name__}"
    return f"{kind} {shown(repr(value), 80)}"


def _nest(path: tuple[str, ...], value: Any) -> Any:
    for part in reversed(path):
        value = {part: value}
    return value


def same(a: Any, b: Any) -> bool:
    """Equal and of the same types, all the way down (``True`` is not ``1``, ``"2"`` is not ``2``)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, Mapping):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def read_strings(request: Request) -> Iterator[tuple[str, str]]:
    """Every string MaxText reads from the request's arguments, with the field it comes from:
    what the ``gs://`` rule checks (``policy``), so a path inside a map literal is seen too."""
    for argument in arguments(request):
        try:
            tree = config_reader.read(argument.text).tree
        except config_reader.Unreadable:
            continue  # refused by argument_problems
        yield from ((argument.field, text) for text in _strings(tree))


def _strings(value: Any) -> Iterator[str]:
    stack = [value]
    while stack:  # not recursive: a read value is bounded, but depth is not ours to trust
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)


# ---- paths ---------------------------------------------------------------------------------------

# MaxText 0.2.4's config fields that name a file, a directory or a prefix MaxText (or a library it
# hands the value to) opens: ``PathStr`` fields and the ``str`` ones their descriptions call a path
# (src/maxtext/configs/types.py at maxtext-v0.2.4; base.yml, post_train/rl.yml). Why a list of
# keys: which values are paths is MaxText's to say, and a path is where a value can reach data.
READ_PATH_KEYS = frozenset(
    {
        "load_parameters_path",  # types.py:337
        "lora_input_adapters_path",  # :338
        "hf_lora_adapter_path",  # :339 (a Hub id or a path)
        "load_full_state_path",  # :346
        "quant_cfg_path",  # :463, opened by layers/quantizations.py:629
        "tokenizer_path",  # :1371 (a Hub id or a path)
        "chat_template_path",  # :1377, read by train_rl.py:665
        "data_template_path",  # :1382
        "dataset_path",  # :1447
        "hf_path",  # :1457 (a Hub dataset id or a path)
        "hf_data_dir",  # :1459
        "hf_train_files",  # :1460
        "hf_eval_files",  # :1462
        "grain_train_files",  # :1469
        "grain_eval_files",  # :1470
        "grain_train_mixture_config_path",  # :1471
        "olmo_index_path",  # :1526
        "olmo_path_remap_from",  # :1530
        "olmo_path_remap_to",  # :1534
        "formatting_func_path",  # :1563, a module importlib imports (instruction_data_processing.py:160)
        "lora_restore_path",  # :1598
        "offline_data_dir",  # :1620
        "inference_metadata_file",  # :2091
        "image_path",  # :2307
        "video_path",  # :2314
        "audio_path",  # :2315
        "vllm_hf_config_path",  # :2467
        "dataset_processor_path",  # :2569
        "reward_functions_path",  # :2621
    }
)
# The fields MaxText writes to (or moves, uploads or dumps into): only the run's own prefix.
WRITE_PATH_KEYS = frozenset(
    {
        "base_output_directory",  # types.py:322
        "checkpoint_todelete_subdir",  # :355 (checkpoints are moved there)
        "checkpoint_todelete_full_path",  # :359
        "save_quantized_params_path",  # :368
        "local_checkpoint_directory",  # :408
        "prefill_cache_dir",  # :2040 (decode writes it)
        "inference_microbenchmark_log_file_path",  # :2089
        "compiled_trainstep_file",  # :2109
        "jax_cache_dir",  # :2119 (JAX's compilation cache writes it)
        "dump_hlo_local_dir",  # :2187
        "dump_hlo_gcs_dir",  # :2192
        "dump_jaxpr_local_dir",  # :2198
        "dump_jaxpr_gcs_dir",  # :2203
        "metrics_file",  # :2209
        "gcs_debug_path",  # :2503 (tensors are uploaded there)
        "checkpoint_dir",  # :2746 (derived from base_output_directory, :3219-3223, 4633-4645)
        "metrics_dir",  # :2750
        "tensorboard_dir",  # :2754
        "managed_mldiagnostics_dir",  # :2758
    }
)
# Fields from which MaxText loads code, or a file that decides what runs: a request may set them only
# where its deployment (or team) runs code a request brings (docs/security.md, "Code a request brings").
CODE_KEYS = frozenset({"formatting_func_path", "chat_template_path", "quant_cfg_path"})


@dataclass(frozen=True)
class PathValue:
    """A value MaxText reads as a path: the request field it comes from, the MaxText field it sets,
    and the value as MaxText reads it."""

    field: str
    key: str
    value: str

    @property
    def writes(self) -> bool:
        return self.key in WRITE_PATH_KEYS


def path_values(request: Request) -> Iterator[PathValue]:
    """Every value of the request that MaxText reads as a path (``READ_PATH_KEYS``,
    ``WRITE_PATH_KEYS``), as it reads it: the typed fields, ``maxtext_overrides`` (the key resolved as
    MaxText resolves it, so a nested or routed spelling is the field it reaches) and
    ``training.vllm_maxtext_config``. A key the pipeline sets or a typed field sets is left to
    ``override_key_problems``, which refuses it."""
    for argument in arguments(request):
        if argument.field == "training.vllm_maxtext_config":
            yield from _vllm_path_values(argument)
            continue
        if not argument.field.startswith(("maxtext_overrides.", "training.")):
            continue
        resolved = _TRAIN_KEYS.resolve(argument.path)
        if not isinstance(resolved, config_keys.Resolved) or resolved.field not in _PATH_KEYS:
            continue
        if argument.field.startswith("maxtext_overrides.") and (
            resolved.field in CONTROLLED_ARGS or resolved.field in _TYPED_BY_FIELD
        ):
            continue
        try:
            value = config_reader.read(argument.text).at(argument.path)
        except (config_reader.Unreadable, KeyError):
            continue  # refused by argument_problems
        yield from (PathValue(argument.field, resolved.field, text) for text in _path_texts(value))


_PATH_KEYS = READ_PATH_KEYS | WRITE_PATH_KEYS


def _vllm_path_values(argument: Argument) -> Iterator[PathValue]:
    try:
        read = config_reader.read(argument.text).at(("vllm_additional_config", "maxtext_config"))
    except (config_reader.Unreadable, KeyError):
        return
    if not isinstance(read, Mapping):
        return
    for key, value in read.items():
        resolved = _VLLM_KEYS.resolve((str(key),))
        if (
            isinstance(resolved, config_keys.Resolved)
            and resolved.field in _PATH_KEYS
            and resolved.field not in CONTROLLED_ARGS  # refused by _vllm_key_problems
        ):
            field = f"training.vllm_maxtext_config.{key}"
            yield from (PathValue(field, resolved.field, text) for text in _path_texts(value))


def _path_texts(value: Any) -> Iterator[str]:
    """The strings of a path value as read: the value, or each item of a list pyconfig made of it."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list | tuple):
        yield from (item for item in value if isinstance(item, str))


# ---- keys ---------------------------------------------------------------------------------------


def override_key_problems(overrides: Mapping[Any, Any]) -> Iterator[Problem]:
    """Each ``maxtext_overrides`` key, as MaxText reads it: one it would refuse or drop, one the
    pipeline sets, or one a typed field sets, under whatever spelling reaches it."""
    fields: dict[str, str] = {}  # the field each key sets -> the key that set it first
    for key in overrides:
        if not isinstance(key, str):
            continue  # the schema reports a key that is not a string
        path = f"maxtext_overrides.{key}"
        try:
            read = config_reader.key_path(key)
        except config_reader.Unreadable as exc:
            yield Problem(path, exc.problem, exc.fix)
            continue
        if ".".join(read) != key:
            # Brackets, escapes or spaces OmegaConf reads away (`[num_epoch]` is num_epoch): every
            # later rule (the step arithmetic, the ceilings) reads the key as written.
            yield Problem(
                path,
                f"MaxText reads the key {shown(key, 80)!r} as {'.'.join(read)!r}",
                f"write it as {'.'.join(read)}",
            )
            continue
        problems = list(_key_problem(path, read, _TRAIN_KEYS))
        yield from problems
        resolved = _TRAIN_KEYS.resolve(read)
        if problems or not isinstance(resolved, config_keys.Resolved):
            continue
        if resolved.field in fields:
            yield Problem(
                path,
                f"{key} and {fields[resolved.field]} both set {resolved.field}, and MaxText keeps only one",
                f"keep one of them ({resolved.field})",
            )
        fields.setdefault(resolved.field, key)


def _key_problem(where: str, read: tuple[str, ...], keys: config_keys.ConfigKeys) -> Iterator[Problem]:
    resolved = keys.resolve(read)
    named = shown(".".join(read))
    if isinstance(resolved, config_keys.Unknown):
        suggestion = resolved.suggestion
        protected = next(
            (p for p in (*read, (suggestion or "").rsplit(".", 1)[-1]) if p in CONTROLLED_ARGS), None
        )
        extra = f"; {protected} is set by the pipeline" if protected else ""
        hint = f"did you mean {suggestion!r}? otherwise " if suggestion and not protected else ""
        yield Problem(
            where,
            f"{named!r} is not a MaxText config key: {resolved.problem}{extra}",
            f"{hint}use a key {keys.config_class} defines, or remove it",
        )
        return
    via = f"{named} reaches {resolved.field}, which" if named != resolved.field else resolved.field
    if resolved.field in CONTROLLED_ARGS:
        yield Problem(where, f"{via} is set by the pipeline", "remove it")
        return
    typed = _TYPED_BY_FIELD.get(resolved.field)
    if typed is not None and keys is _TRAIN_KEYS:
        routed = f" (MaxText routes it to {resolved.section}.{resolved.field})" if resolved.section else ""
        yield Problem(where, f"{via} is a typed field{routed}", f"set {typed} instead")
        return
    if resolved.overwritten:
        yield Problem(
            where,
            f"{keys.config_class} copies the flat key {resolved.field}, which its config files set, over "
            f"{named} (types.py:4571-4585), so MaxText would drop this value",
            f"set {resolved.field} instead",
        )


def _vllm_key_problems(request: Request) -> Iterator[Problem]:
    """``vllm_maxtext_config``'s keys as MaxText's vLLM adapter reads them (after the argument is
    read: the keys are the read map's), against ``MaxTextConfig`` and the pipeline's own keys."""
    text = next(a.text for a in arguments(request) if a.field == "training.vllm_maxtext_config")
    try:
        read = config_reader.read(text).at(("vllm_additional_config", "maxtext_config"))
    except (config_reader.Unreadable, KeyError):
        return  # argument_problems says why
    if not isinstance(read, Mapping):
        return
    for key in read:
        if key == "model_name":
            continue  # the pipeline's own, from `model` (the schema refuses a request's)
        yield from _key_problem(f"training.vllm_maxtext_config.{key}", (str(key),), _VLLM_KEYS)
