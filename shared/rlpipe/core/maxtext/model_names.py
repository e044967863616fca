"""The models MaxText 0.2.4 knows, and which of them the pipeline's three programs can run.

Why a committed list: MaxText finds a model's config by its name (``configs/models/<name>.yml``,
pyconfig.py:459-485); a name it has no file for only logs a warning and trains the default
architecture, and ``to_maxtext`` refuses a name missing from ``HF_IDS`` only when the conversion
starts (to_maxtext.py:882-885), on a cluster, after the TPU slice may already be queued. So
``model`` is checked here, at validation, against what MaxText knows:

- a config file (``model_names.json``, written from the tag by
  ``tests/fixtures/maxtext_models_from_source.py``; the programs tier compares it with the installed
  package);
- a converter mapping (``HF_IDS`` and ``PARAM_MAPPING``): convert and export both need it;
- the preset's architecture (``presets.PRESET_DECODER_BLOCK``): a preset's parallelism, vLLM
  settings and workarounds are one architecture's.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any


@dataclass(frozen=True)
class KnownModel:
    name: str
    decoder_block: str | None
    hf_id: str | None  # the Hub repo the converters know it by (HF_IDS); None: they cannot convert it
    param_mapping: str | None  # the tensor mapping both converters use (PARAM_MAPPING)

    @property
    def convertible(self) -> bool:
        return self.hf_id is not None and self.param_mapping is not None


@cache
def _document() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        resources.files("rlpipe.core.maxtext").joinpath("model_names.json").read_text()
    )
    return data


@cache
def models() -> dict[str, KnownModel]:
    return {
        name: KnownModel(name, entry["decoder_block"], entry["hf_id"], entry["param_mapping"])
        for name, entry in _document()["models"].items()
    }


def source() -> str:
    """Where the list was read (the tag), for messages and the plan."""
    return str(_document()["source"])


def closest(name: str) -> str | None:
    """The known model name nearest to ``name`` (case and separators folded: ``gemma-4-26b``)."""

    def fold(text: str) -> str:
        return "".join(ch for ch in text.lower() if ch.isalnum() or ch == ".")

    folded = {fold(known): known for known in models()}
    if fold(name) in folded:
        return folded[fold(name)]
    matches = difflib.get_close_matches(fold(name), list(folded), n=1, cutoff=0.6)
    return folded[matches[0]] if matches else None


def of_block(decoder_block: str) -> list[str]:
    """The known, convertible models of one architecture."""
    return sorted(m.name for m in models().values() if m.decoder_block == decoder_block and m.convertible)
