"""Publishing a run's exported checkpoint to the Hugging Face Hub (the stage after export).

- ``rlpipe.publisher.program``: the program the publish Job runs (``python3 -c <its source>``),
  importing only the standard library, ``huggingface_hub`` and ``google.cloud.storage`` once
  shipped: :func:`shipped_program` puts the text of ``rlpipe.publisher.exported`` (which files it
  may push, checked against the export manifest) in place of its one import of it.
- ``rlpipe.publisher.card``: the model card (README.md) the control plane renders before the Job
  starts, from ``model_card.md.j2``; ``rlpipe.publisher.evaluation`` turns train_rl's evaluations
  into its table and its ``model-index`` (the Hub's evaluation results).
"""

from __future__ import annotations

from importlib import resources

# program.py's one import of rlpipe, and where exported.py's shippable text starts (after its
# docstring and its ``from __future__`` line, which may only open a file).
IMPORT_LINE = "from rlpipe.publisher.exported import "
SHIPPED_FROM = "# ---- shipped inside the publish Job's program from here"


def shipped_program() -> str:
    """The publish Job's program as its manifest carries it: one text, no rlpipe import."""
    files = resources.files(__name__)
    program = files.joinpath("program.py").read_text(encoding="utf-8")
    exported = files.joinpath("exported.py").read_text(encoding="utf-8")
    lines = program.splitlines(keepends=True)
    (at,) = [i for i, line in enumerate(lines) if line.startswith(IMPORT_LINE)]
    start = exported.index(SHIPPED_FROM)
    return "".join([*lines[:at], exported[start:], *lines[at + 1 :]])
