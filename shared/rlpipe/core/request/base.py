"""What every part of the request schema shares: the strict base model, the error that carries
its own fix, and the spellings of Hub repositories and revisions (models and datasets alike)."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict
from pydantic_core import PydanticCustomError

SHA = re.compile(r"^[0-9a-f]{40}$")
BRANCH_PATTERN = re.compile(r"^(?!-)(?!.*\.\.)(?!.*//)[A-Za-z0-9._/-]{1,100}(?<![./])$")
HF_REPO_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")


def custom_error(problem: str, fix: str) -> PydanticCustomError:
    """A validation error carrying its own fix text, which ``Problem`` extraction picks up."""
    return PydanticCustomError("rlpipe", problem, {"fix": fix})


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=False)


def check_revision(value: str) -> str:
    """A branch name or a full lowercase commit sha (never a 40-hex string in another case, which
    the Hub would read as a branch name while a person reads it as a commit)."""
    if SHA.match(value) or (BRANCH_PATTERN.match(value) and not re.fullmatch(r"[0-9a-fA-F]{40}", value)):
        return value
    raise custom_error(
        f"{value!r} is neither a branch name nor a 40-hex commit sha",
        "use a branch such as 'main', or the full lowercase commit sha",
    )
