"""The watch list (``config/watch.yaml`` in the requests bucket): which Hugging Face repos start runs.

Each entry names a repo and branch and carries a request *template*: the request every release of
that repo becomes, with ``hf_repo`` from the entry and ``hf_revision`` pinned to the release's
commit. Templates are validated by building the full request, so a typo is reported when the
list is checked, not months later when a release arrives. Validation reports every problem
with its path and fix; the poller still serves the valid entries of a list with bad ones.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from rlpipe.core.problems import Problem, RequestInvalid
from rlpipe.core.request import parse_document, validate_request
from rlpipe.core.request.base import BRANCH_PATTERN, HF_REPO_PATTERN
from rlpipe.core.request.policy import Policy
from rlpipe.core.teams import TEAM_NAME
from rlpipe.upstream.release import release_key

WATCH_LIST = "config/watch.yaml"  # in the requests bucket; outside requests/, so never a request itself
DEFAULT_TRIGGER_FILES = (
    "*.safetensors",
    "*.safetensors.index.json",
    "config.json",
    "generation_config.json",
    "tokenizer*",
)
PLACEHOLDER_SHA = "0" * 40
_SET_BY_ENTRY = {
    "hf_repo": ("hf_repo is set by the watch entry", "move it out of the template to the entry's hf_repo"),
    "hf_revision": (
        "hf_revision is pinned to each release's commit sha",
        "remove it; set the entry's branch to choose what is watched",
    ),
    "request_id": (
        "request_id in a template would give every release the same idempotency key, so only the "
        "first release would ever start a run",
        "remove it; each release is keyed by repo, commit sha and template",
    ),
}


class WatchListInvalid(RequestInvalid):
    """Every problem of a watch list (same shape as a rejected request: path, message, fix)."""

    def render(self) -> str:
        count = len(self.problems)
        lines = [f"watch list rejected: {count} problem{'s' if count != 1 else ''}"]
        lines += [f"  - {p}" for p in self.problems]
        return "\n".join(lines)


Glob = Annotated[str, Field(min_length=1, max_length=200)]


class WatchEntry(BaseModel):
    """One watched repo/branch and the request template its releases become."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    hf_repo: Annotated[str, Field(pattern=HF_REPO_PATTERN.pattern)]
    branch: Annotated[str, Field(min_length=1, max_length=100)] = "main"
    template: dict[str, Any]
    debounce_minutes: Annotated[int, Field(ge=0, le=24 * 60)] = 30
    trigger_files: Annotated[list[Glob], Field(min_length=1, max_length=100)] = Field(
        default_factory=lambda: list(DEFAULT_TRIGGER_FILES)
    )
    enabled: bool = True
    # The team its releases run for (core.teams), on a deployment that declares teams: the watch
    # list is the operators' file (config/watch.yaml), so the entry, not the request, says whose.
    team: Annotated[str, Field(pattern=TEAM_NAME)] | None = None

    @field_validator("branch")
    @classmethod
    def _plain_branch(cls, value: str) -> str:
        if value.startswith("refs/"):
            raise ValueError("write the branch name without refs/heads/, e.g. main")
        if len(value) == 40 and all(c in "0123456789abcdef" for c in value):
            raise ValueError("a commit sha never moves; watch a branch such as main")
        if not BRANCH_PATTERN.match(value):
            raise ValueError("use letters, digits, '.', '_', '-' and '/', e.g. main")
        return value

    @property
    def template_hash(self) -> str:
        return template_hash(self.template)

    @property
    def key(self) -> str:
        """This entry's slot in the repo's state: two templates on one repo are tracked apart, and
        so are two teams watching one repo with one template (two teams that share a token Secret
        and a queue can have the same template). ':' is in no branch name, so no team's slot is
        another entry's. An entry without a team keeps the slot it always had."""
        return f"{self.team}:{self.slot_before_teams}" if self.team else self.slot_before_teams

    @property
    def slot_before_teams(self) -> str:
        """The slot an entry had before its team was part of it: a team's entry starts from the
        state found there, so a deployment that declared teams before this keeps its baselines."""
        return f"{self.branch}@{self.template_hash}"

    def release_key(self, sha: str) -> str:
        """The intake idempotency key of this entry's run of release ``sha``: one run per (repo,
        commit, template, team), whoever sees it first (``upstream.release.release_key``)."""
        return release_key(self.hf_repo, sha, self.template_hash, self.team)

    def request_document(self, sha: str) -> dict[str, Any]:
        return {**self.template, "hf_repo": self.hf_repo, "hf_revision": sha}


def template_hash(template: dict[str, Any]) -> str:
    """Short sha256 of the template's canonical JSON: part of each release's idempotency key."""
    canonical = json.dumps(template, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class RejectedEntry:
    """An entry that failed validation: reported by every poll, never polled."""

    index: int
    hf_repo: str | None
    branch: str | None
    enabled: bool
    problems: tuple[Problem, ...]


@dataclass(frozen=True)
class WatchList:
    entries: tuple[WatchEntry, ...] = ()
    rejected: tuple[RejectedEntry, ...] = ()
    problems: tuple[Problem, ...] = ()  # all problems, including those of rejected entries
    source: str = WATCH_LIST

    @property
    def valid(self) -> bool:
        return not self.problems


# The allowlists an entry's template is checked against, by the entry's team (None: no team):
# the ones intake will check its releases' requests against (``Poller.policy_for``).
PolicyFor = Callable[[str | None], Policy]


def load_watch_list(
    data: bytes | str, *, source: str = WATCH_LIST, policy_for: PolicyFor | None = None
) -> WatchList:
    """Parse and validate, keeping the valid entries when others are bad (the poller's view).
    ``policy_for``: the allowlists of each entry's team (None: the built-in defaults).

    Raises ``WatchListInvalid`` only when nothing can be used: unreadable text or a wrong shape.
    """
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    if not text.strip():
        raise WatchListInvalid(
            [Problem("", f"{source} is empty", "write `watch:` followed by a list of entries")]
        )
    try:
        doc = parse_document(data, source=source)
    except RequestInvalid as exc:
        raise WatchListInvalid(exc.problems) from None
    top: list[Problem] = []
    for key in doc:
        if key != "watch":
            top.append(
                Problem(
                    str(key), f"unknown key {key!r}", "the document has one key, `watch`: a list of entries"
                )
            )
    raw_entries = doc.get("watch")
    if raw_entries is None:
        top.append(Problem("watch", "missing", "add `watch:` with a list of entries"))
        raise WatchListInvalid(top)
    if not isinstance(raw_entries, list):
        top.append(
            Problem(
                "watch",
                f"is a {type(raw_entries).__name__}, not a list",
                "write `watch:` as a list (`- hf_repo: ...`)",
            )
        )
        raise WatchListInvalid(top)
    entries: list[WatchEntry] = []
    rejected: list[RejectedEntry] = []
    problems = list(top)
    seen: dict[tuple[str, str], int] = {}
    for index, raw in enumerate(raw_entries):
        entry, entry_problems = _validate_entry(index, raw, policy_for)
        if entry is not None:
            identity = (entry.hf_repo, entry.key)
            if identity in seen:
                entry_problems.append(
                    Problem(
                        f"watch[{index}]",
                        f"same hf_repo, branch, template and team as watch[{seen[identity]}]",
                        "remove one of the two entries",
                    )
                )
            seen.setdefault(identity, index)
        if entry is not None and not entry_problems:
            entries.append(entry)
            continue
        problems.extend(entry_problems)
        raw_map = raw if isinstance(raw, dict) else {}
        repo, branch = raw_map.get("hf_repo"), raw_map.get("branch", "main")
        rejected.append(
            RejectedEntry(
                index=index,
                hf_repo=repo if isinstance(repo, str) else None,
                branch=branch if isinstance(branch, str) else None,
                enabled=raw_map.get("enabled", True) is not False,
                problems=tuple(entry_problems),
            )
        )
    return WatchList(tuple(entries), tuple(rejected), tuple(problems), source)


def validate_watch_list(
    data: bytes | str, *, source: str = WATCH_LIST, policy_for: PolicyFor | None = None
) -> WatchList:
    """Strict: every problem of the whole list in one ``WatchListInvalid`` (the CLI's view)."""
    watch = load_watch_list(data, source=source, policy_for=policy_for)
    if watch.problems:
        raise WatchListInvalid(list(watch.problems))
    return watch


def _validate_entry(
    index: int, raw: Any, policy_for: PolicyFor | None
) -> tuple[WatchEntry | None, list[Problem]]:
    where = f"watch[{index}]"
    if not isinstance(raw, dict):
        return None, [
            Problem(
                where,
                f"is a {type(raw).__name__}, not a mapping",
                "write each entry as a mapping with hf_repo and template",
            )
        ]
    problems: list[Problem] = []
    entry: WatchEntry | None = None
    try:
        entry = WatchEntry.model_validate(raw)
    except ValidationError as exc:
        problems.extend(_entry_problems(where, exc))
    template = raw.get("template")
    if isinstance(template, dict):
        repo = raw.get("hf_repo")
        if not (isinstance(repo, str) and HF_REPO_PATTERN.match(repo)):
            repo = "placeholder/placeholder"
        team = raw.get("team") if isinstance(raw.get("team"), str) else None
        policy = policy_for(team) if policy_for is not None else None
        problems.extend(_template_problems(where, template, repo, policy))
    return entry, problems


def _template_problems(
    where: str, template: dict[str, Any], repo: str, policy: Policy | None
) -> list[Problem]:
    """Problems of the request every release of this entry becomes, with paths inside the entry."""
    problems = [
        Problem(f"{where}.template.{key}", *_SET_BY_ENTRY[key]) for key in template if key in _SET_BY_ENTRY
    ]
    rest = {k: v for k, v in template.items() if k not in _SET_BY_ENTRY}
    try:
        validate_request({**rest, "hf_repo": repo, "hf_revision": PLACEHOLDER_SHA}, policy)
    except RequestInvalid as exc:
        for p in exc.problems:
            if p.path in ("hf_repo", "hf_revision"):
                continue  # set by the entry: reported on the entry's own fields
            path = f"{where}.template.{p.path}" if p.path else f"{where}.template"
            problems.append(Problem(path, p.message, p.fix))
    return problems


_FIXES = {
    "missing": "add this field",
    "string_type": "write a string (quote it in YAML)",
    "int_type": "write a whole number",
    "bool_type": "write true or false",
    "dict_type": "write a mapping of request fields",
    "list_type": "write a list, e.g. ['*.safetensors', 'config.json']",
    "too_short": "give at least one value",
    "too_long": "shorten the list",
    "string_too_short": "give a non-empty value",
    "string_too_long": "shorten the value",
    "greater_than_equal": "raise the value",
    "less_than_equal": "lower the value",
}


def _entry_problems(where: str, exc: ValidationError) -> list[Problem]:
    allowed = sorted(WatchEntry.model_fields)
    problems = []
    for err in exc.errors(include_url=False):
        loc = [str(x) if not isinstance(x, int) else f"[{x}]" for x in err["loc"]]
        path = where + "".join(x if x.startswith("[") else f".{x}" for x in loc)
        kind = err["type"]
        if kind == "extra_forbidden":
            close = difflib.get_close_matches(loc[-1], allowed, n=1, cutoff=0.75)
            hint = f"remove it; allowed here: {', '.join(allowed)}"
            problems.append(
                Problem(
                    path,
                    f"unknown key {loc[-1]!r}",
                    f"did you mean {close[0]!r}? otherwise {hint}" if close else hint,
                )
            )
        elif kind == "string_pattern_mismatch":
            what = "a Hugging Face repo id (owner/name)" if loc[:1] == ["hf_repo"] else "a branch name"
            problems.append(Problem(path, f"{err['input']!r} is not {what}", f"write {what}"))
        elif kind == "value_error":
            problems.append(
                Problem(
                    path,
                    f"{err['input']!r} is not a branch name",
                    str(err.get("ctx", {}).get("error", "write a branch name")),
                )
            )
        elif loc[:1] == ["trigger_files"] and kind == "string_type":
            problems.append(
                Problem(
                    path,
                    f"{err['input']!r} is not a glob",
                    "write each glob as a string, e.g. '*.safetensors'",
                )
            )
        else:
            problems.append(Problem(path, err["msg"], _FIXES.get(kind, "correct the value")))
    return problems
