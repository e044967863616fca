"""The tier's parts, what each runs on, what runs it, and the key its result is stored under.

=============  =============================================================================
``config``     MaxText's config reader on every rendered argv (``programs.cases``), the reader
               facts corpus, and the installed package's nested key set
``convert``    the real ``to_maxtext`` on the tiny fixture, with the canonical example's argv
``export``     the real ``to_huggingface`` on that conversion, with the example's export argv
``train_data`` train_rl's own data pipeline and reward loading on staged data shapes
``reader``     MaxText's own reading of each line of the reader differential corpus: what
               pyconfig hands to its pydantic types (``drivers/read_values.py``)
=============  =============================================================================

A part's key is the sha256 of everything its result depends on, and of nothing else: the lock,
the code that runs it (``programs/process.py``, the part's own runner module, its drivers, the
shared modules those import, such as the argv mapping ``rlpipe.local.simulator.testbed``), the
fixture's bytes where it reads them, the rendered argv or request (its job), and the key of the
part it reads (export reads convert's output). So editing one part's runner or driver reruns that
part (and the parts that read it), not the others. The tests compute the same keys from the
checkout: a result made from another rendering, lock, fixture or code is never read.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from programs import config_part, converters_part, process, reader_part, train_data_part
from programs.cases import EXAMPLES, PROGRAMS, ROOT, Case, cases
from programs.data_shapes import SHAPES
from rlpipe.core import layout
from rlpipe.local.hub_double import parquet
from rlpipe.local.simulator import testbed

HERE = Path(__file__).resolve().parent
LOCK = HERE / "requirements-maxtext.lock"
DRIVERS = process.DRIVERS
FIXTURE = ROOT / "tests" / "fixtures" / "tiny_gemma4"
CORPUS = HERE / "corpus" / "reader-facts.txt"
DIFFERENTIAL = HERE / "corpus" / "reader-differential.txt"
CONVERT_CASE = "gemma4-26b-v6e-32/convert"  # the canonical example's stages run for real
EXPORT_CASE = "gemma4-26b-v6e-32/export"
WEIGHT_SUFFIXES = (".safetensors",)
# What every part runs through: the interpreter's lock and the code that starts its processes.
COMMON = (LOCK, HERE / "process.py")
TESTBED = Path(inspect.getfile(testbed))  # the argv mapping: convert, export, train_data

Runner = Callable[[dict[str, Any], process.Run], dict[str, Any]]


def _module(module: object) -> Path:
    return Path(inspect.getfile(module))  # type: ignore[arg-type]


@dataclass(frozen=True)
class Part:
    name: str
    job: dict[str, Any]  # what the part runs on, JSON, with testbed.WORK where the run's folder goes
    files: tuple[Path, ...]  # the code that runs it and the files it reads: the key covers their bytes
    after: tuple[str, ...] = ()  # parts whose output this one reads
    runner: Runner | None = None  # job and run → the result (programs.process.Run)


def corpus_items(path: Path = CORPUS) -> list[str]:
    """A corpus file: one ``key=value`` per line; blank lines and ``#`` comments skipped. A value
    keeps its spaces (``key= value`` is a case of its own)."""
    items = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            items.append(line)
    return items


def _case(name: str, all_cases: list[Case]) -> Case:
    return next(c for c in all_cases if c.name == name)


def fixture_files() -> tuple[Path, ...]:
    return tuple(sorted(p for p in FIXTURE.iterdir() if p.is_file()))


def source_files() -> tuple[Path, ...]:
    """The fixture's files other than weights: what the convert and export scripts pin and fetch
    (tokenizer, config), as ``pinning`` copies them."""
    return tuple(p for p in fixture_files() if not p.name.endswith(WEIGHT_SUFFIXES))


def _repo(paths: tuple[Path, ...]) -> list[str]:
    return [str(p.relative_to(ROOT)) for p in paths]


def _config(all_cases: list[Case]) -> Part:
    job = {
        "cases": [c.as_json() for c in all_cases],
        "corpus": {"module": PROGRAMS["train"], "base": [], "items": corpus_items()},
        "nested": True,
    }
    code = (_module(config_part), DRIVERS / "read_config.py")
    return Part("config", job, (*code, CORPUS), runner=config_part.run)


def _convert(all_cases: list[Case]) -> Part:
    case = _case(CONVERT_CASE, all_cases)
    args = testbed.converter_args(case.args)
    job = {
        "case": case.name,
        "module": PROGRAMS["convert"],
        "args": args,
        "stage_folders": {testbed.value_of(args, "hf_model_path"): _repo(fixture_files())},
        "bucket": f"{testbed.WORK}/{testbed.BUCKET_DIR}",
        "rendered": case.args,
    }
    code = (_module(converters_part), TESTBED)
    return Part("convert", job, (*code, *fixture_files()), runner=converters_part.run_convert)


def _export(all_cases: list[Case]) -> Part:
    case = _case(EXPORT_CASE, all_cases)
    convert = _case(CONVERT_CASE, all_cases)
    attempt_dir = layout.parse_gs(testbed.value_of(convert.args, "base_output_directory"))[1]
    args = testbed.converter_args(case.args)
    job = {
        "case": case.name,
        "module": PROGRAMS["export"],
        "args": args,
        # export's hf_model_path holds the pinned source files (the tokenizer), as pinning fetches them
        "stage_folders": {testbed.value_of(args, "hf_model_path"): _repo(source_files())},
        # training is not run: the conversion's items stand where export reads a trained step
        "stage_converted": {
            "from": layout.converted_items(attempt_dir),
            "to": testbed.value_of(args, "load_parameters_path"),
        },
        "output": testbed.value_of(args, "base_output_directory"),
        "fixture": str(FIXTURE.relative_to(ROOT)),
        "rendered": case.args,
    }
    code = (_module(converters_part), TESTBED, DRIVERS / "read_tensors.py")
    return Part(
        "export", job, (*code, *fixture_files()), after=("convert",), runner=converters_part.run_export
    )


def _train_data() -> Part:
    from programs.cases import BUCKET, HF_REVISION, RUN_ID, container
    from rlpipe.core.manifests import RenderContext, render

    ctx = RenderContext(run_id=RUN_ID, bucket=BUCKET, hf_revision=HF_REVISION)
    shapes = []
    user_files: set[Path] = set()
    for shape in SHAPES:
        req = shape.request()
        rendered = list(container(render(req, "train", 1, ctx))["args"])
        args = testbed.localize(rendered)
        staged: dict[str, str] = {}
        if req.rewards is not None and req.rewards.file is not None and req.rewards.file.path:
            source = EXAMPLES / req.rewards.file.path
            user_files.add(source)
            staged[testbed.value_of(args, "reward_functions_path")] = str(source.relative_to(ROOT))
        shapes.append(
            {
                "name": shape.name,
                "args": args,
                "rendered": rendered,
                "stage_folders": {testbed.value_of(args, "tokenizer_path"): _repo(source_files())},
                "stage_files": staged,
                "tables": {
                    testbed.value_of(args, "hf_train_files"): shape.train_table(),
                    testbed.value_of(args, "hf_eval_files"): shape.eval_table(),
                },
                "long_rows": shape.long_rows(),
            }
        )
    code = (
        _module(train_data_part),
        TESTBED,
        _module(parquet),
        DRIVERS / "train_data.py",
        DRIVERS / "stubs.py",
    )
    files = (*code, *source_files(), *sorted(user_files))
    return Part("train_data", {"shapes": shapes}, files, runner=train_data_part.run)


def _reader() -> Part:
    job = {"module": PROGRAMS["train"], "items": corpus_items(DIFFERENTIAL)}
    code = (_module(reader_part), DRIVERS / "read_values.py")
    return Part("reader", job, (*code, DIFFERENTIAL), runner=reader_part.run)


@cache
def parts() -> dict[str, Part]:
    all_cases = cases()
    found = [_config(all_cases), _convert(all_cases), _export(all_cases), _train_data(), _reader()]
    return {p.name: p for p in found}


def part_names() -> tuple[str, ...]:
    """Every part, in the order they run (a part after the ones it reads)."""
    return tuple(parts())


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@cache
def key(name: str) -> str:
    """The key of a part's result: everything it depends on, hashed (names relative to the repo)."""
    part = parts()[name]
    material = {
        "part": name,
        "files": {str(p.relative_to(ROOT)): _digest(p) for p in (*COMMON, *part.files)},
        "job": part.job,
        "after": {a: key(a) for a in part.after},
    }
    text = json.dumps(material, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def result_dir(cache_dir: Path, name: str) -> Path:
    return cache_dir / "results" / f"{name}-{key(name)}"
