"""The simulator held to the real programs: its conversion and export against MaxText's own.

The way the cluster conformance tests hold the double to the real controllers
(``tests/cluster/real_plane/test_real_conformance.py``), these hold the simulator's played ``to_maxtext`` and
``to_huggingface`` to what the real ones did in ``make programs`` (``programs.parts``: convert,
export), for the same rendered request: the canonical example's convert and export containers,
read by the simulator as it reads any pod (``program.identify``). Compared: structure, never
tensor bytes (the simulator writes tiny contents under real names):

- the conversion: every file that is not array data (markers, metadata, sharding) in the same
  place; the arrays' names, each layer's kinds of array the same both ways (the simulator writes
  two layers where the model has thirty);
- the export: the same file names in the directory the export script uploads (the simulator with
  one shard, as the tiny fixture's export has);
- the log lines: each line the simulator prints for a program is one the real program printed,
  in the same format (``tests/fixtures/maxtext_facts.yaml`` names each; absl's prefix with the same
  file:line, or Python logging's default format for to_maxtext).
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from programs import parts
from programs.cases import BUCKET, HF_REVISION, RUN_ID, cases
from rlpipe.core.manifests import RenderContext, render
from rlpipe.local.simulator import testbed
from rlpipe.local.simulator.maxtext import PROGRAMS as SIMULATED
from rlpipe.local.simulator.program import Program, identify
from tests.core.test_maxtext_facts import FakeContainer
from tests.harness.programs import result

CASES = {c.name: c for c in cases()}
FACTS = yaml.safe_load((Path(__file__).resolve().parents[1] / "fixtures" / "maxtext_facts.yaml").read_text())
ZARR_CHUNK = re.compile(r"^[0-9]+(\.[0-9]+)*$")
LAYER = re.compile(r"\.layers_([0-9]+)\.")
ABSL = re.compile(FACTS["log_prefix"]["regex"])
SCRIPT_LINES = [re.compile(entry["regex"]) for entry in FACTS["rlpipe_script_lines"]]


def _ran(part: str) -> dict[str, Any]:
    ran = result(part)
    assert ran["exit_code"] == 0, f"{part} exited {ran['exit_code']}:\n" + "\n".join(ran["log"][-25:])
    return ran


def _program(case: str) -> Program:
    """The program the simulator reads from the case's rendered pod, with its script's steps."""
    found = CASES[case]
    ctx = RenderContext(run_id=RUN_ID, bucket=BUCKET, hf_revision=HF_REVISION)
    program = identify(render(found.request, found.stage, 1, ctx)["spec"]["template"]["spec"])
    assert program is not None and program.stage == found.stage
    return program


def _structure(names: list[str] | dict[str, int], base: str) -> tuple[set[str], set[str]]:
    """(files that are not array data, array directories) under ``base``, relative to it."""
    files, arrays = set(), set()
    for name in names:
        if not name.startswith(base):
            continue
        rel = name[len(base) :]
        head, _, leaf = rel.rpartition("/")
        if leaf == ".zarray" or ZARR_CHUNK.match(leaf):
            arrays.add(head)
        else:
            files.add(rel)
    return files, arrays


def _simulated_conversion() -> tuple[FakeContainer, str]:
    program = _program(parts.CONVERT_CASE)
    container = FakeContainer()
    assert SIMULATED["convert"](container, program.args) == 0
    return container, program.args.require("base_output_directory")


def _conversions() -> tuple[tuple[set[str], set[str]], tuple[set[str], set[str]]]:
    """(files, arrays) of the real conversion and of the simulated one, each under its step dir."""
    attempt_dir = testbed.value_of(CASES[parts.CONVERT_CASE].args, "base_output_directory")
    real = _structure(_ran("convert")["objects"], attempt_dir.split("/", 3)[3])
    container, base = _simulated_conversion()
    files, arrays = _structure(list(container.files), base)
    pinned = "hf-source/"  # the script's pin step writes there, not to_maxtext
    return real, ({f for f in files if not f.startswith(pinned)}, arrays)


def _kinds(arrays: set[str]) -> set[str]:
    return {LAYER.sub(".layers_N.", a) for a in arrays}


def _layers(arrays: set[str]) -> set[int]:
    return {int(m.group(1)) for a in arrays if (m := LAYER.search(a))}


# ---- to_maxtext ---------------------------------------------------------------------------------


def test_the_simulator_writes_the_files_the_real_conversion_writes() -> None:
    """Every file that is not array data: markers, metadata, sharding, in the same places."""
    (real_files, _), (sim_files, _) = _conversions()
    assert sim_files == real_files, (
        f"only real: {sorted(real_files - sim_files)}; only simulated: {sorted(sim_files - real_files)}"
    )


def test_the_simulator_names_only_arrays_the_real_conversion_writes() -> None:
    (_, real_arrays), (_, sim_arrays) = _conversions()
    assert sim_arrays <= real_arrays, f"simulated, not real: {sorted(sim_arrays - real_arrays)}"


def test_the_simulator_writes_every_kind_of_array_the_real_conversion_writes() -> None:
    """The step, the embedding, the final norm and, in each layer, every array MaxText saves for a
    mixture-of-experts Gemma 4 layer; two layers of the thirty."""
    (_, real_arrays), (_, sim_arrays) = _conversions()
    assert _kinds(sim_arrays) == _kinds(real_arrays), (
        f"only real: {sorted(_kinds(real_arrays) - _kinds(sim_arrays))}; "
        f"only simulated: {sorted(_kinds(sim_arrays) - _kinds(real_arrays))}"
    )
    assert _layers(sim_arrays) and _layers(sim_arrays) < _layers(real_arrays)


# ---- to_huggingface -----------------------------------------------------------------------------


def test_the_simulated_export_writes_the_files_the_real_export_writes() -> None:
    """In the directory the export script uploads: tokenizer (transformers 5's files), config, weights."""
    program = _program(parts.EXPORT_CASE)
    load = program.args.require("load_parameters_path")
    container = FakeContainer({load.rstrip("/") + "/_METADATA": b"{}"})
    container.export_shards = 1  # the tiny fixture's export is one file, as the real one's
    args = replace(program.args, steps=())  # the script's steps around it are compared elsewhere
    assert SIMULATED["export"](container, args) == 0
    output = program.args.require("base_output_directory").rstrip("/") + "/"
    simulated = {u[len(output) :] for u in container.files if u.startswith(output)}
    real = set(_ran("export")["exported"])
    assert simulated == real, (
        f"only real: {sorted(real - simulated)}; only simulated: {sorted(simulated - real)}"
    )


# ---- the lines both print -----------------------------------------------------------------------


def _line_kinds(stage: str, lines: list[str]) -> list[tuple[str, tuple[str, ...]] | None]:
    """For each line: the fact it is (its id) and how it is printed (format, level, file:line), or
    None for a line no fact describes. rlpipe's own script lines are left out."""
    own = FACTS["programs"][stage].get("log_format")
    prefix = re.compile(own["regex"]) if own else ABSL
    out: list[tuple[str, tuple[str, ...]] | None] = []
    for line in lines:
        if any(rx.match(line) for rx in SCRIPT_LINES):
            continue
        head = prefix.match(line)
        message = line[head.end() :] if head else ""
        fact = next(
            (e for e in FACTS["programs"][stage]["lines"] if head and re.match(e["regex"], message)), None
        )
        if head is None or fact is None:
            out.append(None)
            continue
        if own:
            out.append((fact["id"], ("logging", head.group("level"))))
        else:  # absl: the severity letter, then "file:line] " at the end of the prefix
            where = head.group(0).rstrip().rstrip("]").rsplit(" ", 1)[-1]
            out.append((fact["id"], ("absl", line[0], where)))
    return out


def _simulated_lines(stage: str) -> list[str]:
    if stage == "convert":
        return _simulated_conversion()[0].lines
    program = _program(parts.EXPORT_CASE)
    load = program.args.require("load_parameters_path")
    container = FakeContainer({load.rstrip("/") + "/_METADATA": b"{}"})
    assert SIMULATED["export"](container, replace(program.args, steps=())) == 0
    return container.lines


def test_each_line_the_simulator_prints_is_one_the_real_program_printed_in_its_format() -> None:
    """to_maxtext's lines come out in Python logging's default format (it runs outside absl.app),
    to_huggingface's with absl's prefix and the source line of the call; the simulator prints
    each line as the real program printed it."""
    for stage in ("convert", "export"):
        real = {kind for kind in _line_kinds(stage, _ran(stage)["log"]) if kind is not None}
        simulated = _line_kinds(stage, _simulated_lines(stage))
        assert simulated and None not in simulated, (stage, _simulated_lines(stage))
        missing = [kind for kind in simulated if kind not in real]
        assert not missing, f"{stage}: printed by the simulator, not so by the real program: {missing}"
