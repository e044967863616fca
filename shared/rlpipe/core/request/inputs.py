"""What a run trains on and how it is rewarded: the dataset, the reward functions, the chat template.

Each maps to MaxText 0.2.4's own keys (``maxtext/configs/post_train/rl.yml:199-245``), so a request
says in its own words what ``train_rl`` would be told:

- ``dataset`` → ``dataset_name``, ``eval_dataset_name``, ``hf_subset``, ``train_split``,
  ``eval_split``; the data itself reaches train_rl as staged parquet files at the pinned commit
  (``hf_train_files``/``hf_eval_files``, ``train_rl.py:170-190``), never as a moving branch;
- ``dataset.processor`` → ``dataset_processor_path`` (a ``process_data`` of the user's);
- ``rewards`` → ``reward_functions_path`` + ``reward_functions``, which REPLACE the built-in three
  (``train_rl.py:402-424``);
- ``chat_template`` → ``data_template_path`` (JSON with ``SYSTEM_PROMPT`` and ``TEMPLATE``).

A user's file is named where the request lives (``path``: beside the request in the bucket, or a
``gs://`` URI the deployment allows) or carried ``inline``. Intake copies it under the run's own
prefix and records its sha256 (``sha256``), so every attempt runs exactly those bytes.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field, field_validator, model_validator

from rlpipe.core.request.base import HF_REPO_PATTERN, Strict, check_revision, custom_error

HF_REPO = HF_REPO_PATTERN.pattern
# Subset (config) names as the Hub's dataset cards spell them (``configs``); split names as
# ``datasets`` accepts them: word characters and dots (datasets 5.2.0 naming.py:29).
_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
_SPLIT = r"^[A-Za-z0-9_]{1,64}(\.[A-Za-z0-9_]{1,64})*$"
_RELATIVE = re.compile(r"^(?!/)(?!.*(?:^|/)\.\.?(?:/|$))[A-Za-z0-9._/-]{1,200}$")
_GS = re.compile(r"^gs://[a-z0-9][a-z0-9._-]{1,220}/[^\s]{1,900}$")
# A small text file, inline or not: Pub/Sub carries a request of up to 10 MB, the ledger keeps it.
MAX_INLINE_BYTES = 256 * 1024


class UserFile(Strict):
    """A small file of the user's. Exactly one of ``path`` and ``inline``.

    ``path``: relative to the folder the request was uploaded to (``requests/team-a/`` for
    ``requests/team-a/run.yaml``), or a ``gs://`` URI under a prefix the deployment allows.
    ``sha256``: optional on the way in (then the file must have exactly these bytes); intake sets
    it, and the run's copy, in the request the ledger keeps."""

    path: str | None = None
    inline: Annotated[str, Field(max_length=MAX_INLINE_BYTES)] | None = None
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] | None = None

    @field_validator("path")
    @classmethod
    def _path(cls, value: str | None) -> str | None:
        if value is None or _GS.match(value) or _RELATIVE.match(value):
            return value
        raise custom_error(
            f"{value[:200]!r} is neither a path beside the request nor a gs:// URI",
            "write a relative path such as 'rewards.py' (no '..', no leading '/') or gs://BUCKET/OBJECT",
        )

    @model_validator(mode="after")
    def _one_source(self) -> UserFile:
        if (self.path is None) == (self.inline is None):
            raise custom_error(
                "name the file with exactly one of path and inline",
                "set path: rewards.py (beside the request) or inline: | with the file's text",
            )
        return self

    @property
    def is_gs(self) -> bool:
        return self.path is not None and self.path.startswith("gs://")


class DatasetSpec(Strict):
    """The Hub dataset train_rl trains and evaluates on, pinned to a commit at plan time."""

    repo: Annotated[str, Field(pattern=HF_REPO)] = Field(description="train dataset (dataset_name)")
    revision: str = Field(description="branch or 40-hex commit sha of the train dataset")
    subset: Annotated[str, Field(pattern=_NAME)] | None = Field(
        description="the dataset's config (hf_subset); None = its default config"
    )
    train_split: Annotated[str, Field(pattern=_SPLIT)]
    eval_repo: Annotated[str, Field(pattern=HF_REPO)] | None = Field(
        default=None, description="evaluation dataset (eval_dataset_name); None = the train dataset"
    )
    eval_revision: str | None = Field(default=None, description="branch or sha of eval_repo; None = revision")
    eval_subset: Annotated[str, Field(pattern=_NAME)] | None = Field(
        default=None,
        description="the evaluation dataset's config; None = subset for the train dataset, else its default",
    )
    eval_split: Annotated[str, Field(pattern=_SPLIT)]
    processor: UserFile | None = Field(
        default=None, description="a Python file defining process_data (dataset_processor_path)"
    )

    @field_validator("revision", "eval_revision")
    @classmethod
    def _revision(cls, value: str | None) -> str | None:
        return None if value is None else check_revision(value)

    @property
    def evaluated_repo(self) -> str:
        return self.eval_repo or self.repo

    @property
    def evaluated_revision(self) -> str:
        return self.eval_revision or self.revision

    @property
    def evaluated_subset(self) -> str | None:
        """train_rl reads staged files, so each dataset's config is its own (``hf_subset`` names
        the training one only, and is not read for files: train_rl.py:176-186)."""
        if self.eval_subset is not None:
            return self.eval_subset
        return self.subset if self.evaluated_repo == self.repo else None


_IDENTIFIER = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"


class RewardsSpec(Strict):
    """The user's reward functions: they replace MaxText's built-in three (not add to them)."""

    file: UserFile = Field(description="a Python file (reward_functions_path)")
    functions: Annotated[
        list[Annotated[str, Field(pattern=_IDENTIFIER)]], Field(min_length=1, max_length=16)
    ] = Field(description="names of the functions to take from it (reward_functions)")
