"""Fault scenarios: which workload misbehaves, how, and on which attempt.

A scenario is data, not code, so a demo, a benchmark and a test can share one file and a
person can read what will go wrong. Parsing is strict: a typo in a fault must fail loudly
with the entry and the fix, never silently run a happy path that looks like a passing test.

Besides faults, a scenario can describe the train split the simulated train_rl reads (entries of
the same list, matched the same way, for the train stage only): ``train-examples:<n>`` (the split
holds n examples) and ``long-prompts:<n>`` (n of them are longer than max_prefill_predict_length,
so the length filter drops them). Without them the data is plentiful. :func:`train_data` reads
them; later the simulator will read the staged dataset's row count instead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rlpipe.local.simulator.maxtext import STAGES, stage_of_object
from rlpipe.local.simulator.rl_eval import TrainSplit, train_data

FAULT_KINDS = (
    "preempt",
    "evict",
    "unschedulable",
    "oom",
    "exit",
    "image-pull",
    "api-5xx",
    "drop-events",
    "stall",
    "provision-fail",
    "no-quota",
    "hold",
)
FAULT_SYNTAX = (
    "preempt@<step>[:head|:worker][:kubelet|:scheduler|:taint|:eviction-api|:podgc][:head-first]",
    "evict@<step>[:preempted|:cohort-reclamation|:pods-ready-timeout|:node-failures|:deactivated"
    "|:local-queue-stopped|:cluster-queue-stopped]",
    "unschedulable:<seconds>",
    "oom",
    "exit:<code>",
    "image-pull",
    "api-5xx:<n>",
    "drop-events",
    "stall",
    "provision-fail",
    "no-quota",
    "hold@<step>",
)
# The train split the simulated train_rl reads (not faults: the soak deals FAULT_KINDS only).
DATA_KINDS = ("train-examples", "long-prompts")
DATA_SYNTAX = ("train-examples:<n>", "long-prompts:<n>")
ENTRY_KEYS = ("stage", "attempt", "fault", "run")
# A Kubernetes label value (the ``rlpipe.dev/run`` label a fault's ``run`` is matched against).
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
# Who disrupts a pod → the DisruptionTarget reason it writes (see pods.DISRUPTIONS for the sources).
DISRUPTION_REASONS = {
    "kubelet": "TerminationByKubelet",
    "scheduler": "PreemptionByScheduler",
    "taint": "DeletionByTaintManager",
    "eviction-api": "EvictionByEvictionAPI",
    "podgc": "DeletionByPodGC",
}
# Why Kueue evicts (see kueue.EVICTIONS for the reasons and messages).
EVICTION_WHY = (
    "preempted",
    "cohort-reclamation",
    "pods-ready-timeout",
    "node-failures",
    "deactivated",
    "local-queue-stopped",
    "cluster-queue-stopped",
)


class ScenarioError(ValueError):
    """A scenario entry that cannot be understood; the message names the entry and the fix."""


@dataclass(frozen=True)
class Fault:
    """One injected misbehaviour, matched to workloads by stage and (optionally) attempt and run.

    ``run`` exists so that many runs can share one long-lived stack (a soak, a benchmark) and
    each still get its own fault: it is compared with the workload's ``rlpipe.dev/run`` label.
    """

    kind: str
    stage: str
    attempt: int | None = None  # None: every attempt
    step: int | None = None  # preempt: the training step (0 = at start)
    target: str | None = None  # preempt on a JobSet: "worker" (a TPU host, default) or "head"
    by: str = "kubelet"  # preempt: who disrupts the pod (a key of DISRUPTION_REASONS)
    head_first: bool = False  # preempt: pods use their whole grace period; the head's Job fails first
    why: str | None = None  # evict: why Kueue evicts (EVICTION_WHY; None = preempted)
    seconds: float | None = None  # unschedulable: simulated seconds spent Pending
    code: int | None = None  # exit: the program's exit code
    count: int | None = None  # api-5xx: how many API requests fail; train-examples, long-prompts: n
    run: str | None = None  # None: every run; else only workloads labelled rlpipe.dev/run=<run>

    def matches(self, stage: str, attempt: int | None, run: str | None = None) -> bool:
        """A run-scoped fault needs the run to be known and equal: when the caller cannot tell
        which run a workload or object belongs to, striking another run's workload would be
        worse than missing one, so the fault does not apply."""
        if self.stage != stage:
            return False
        if self.run is not None and self.run != run:
            return False
        return self.attempt is None or attempt is None or self.attempt == attempt

    @property
    def disruption_reason(self) -> str:
        return DISRUPTION_REASONS[self.by]

    def body(self) -> str:
        """The fault part alone (``preempt@30:head``), as a scenario file's ``fault`` holds it."""
        if self.kind == "preempt":
            body = f"preempt@{self.step}"
            body += f":{self.target}" if self.target else ""
            body += f":{self.by}" if self.by != "kubelet" else ""
            body += ":head-first" if self.head_first else ""
        elif self.kind == "evict":
            body = f"evict@{self.step}" + (f":{self.why}" if self.why else "")
        elif self.kind == "hold":
            body = f"hold@{self.step}"
        elif self.kind == "unschedulable":
            body = f"unschedulable:{self.seconds:g}"
        elif self.kind == "exit":
            body = f"exit:{self.code}"
        elif self.kind in ("api-5xx", *DATA_KINDS):
            body = f"{self.kind}:{self.count}"
        else:
            body = self.kind
        return body

    def spec(self) -> str:
        """The canonical ``stage[:attempt]:fault`` string (what :func:`parse_fault` accepts);
        the string form has no run (``to_document`` keeps it)."""
        prefix = f"{self.stage}:{self.attempt}" if self.attempt is not None else self.stage
        return f"{prefix}:{self.body()}"


@dataclass(frozen=True)
class Scenario:
    """An ordered set of faults. When two faults of the same effect match one workload, the
    first listed wins; faults of different kinds combine (unschedulable, then oom)."""

    faults: tuple[Fault, ...] = field(default_factory=tuple)

    # -- building ------------------------------------------------------------------------------

    @classmethod
    def from_strings(cls, specs: Iterable[str]) -> Scenario:
        """From CLI-style strings: ``train:1:preempt@30``, ``convert:oom``, ``drop-events:train``."""
        return cls(tuple(parse_fault(spec) for spec in specs))

    @classmethod
    def from_document(cls, doc: Any, *, source: str = "scenario") -> Scenario:
        """From a parsed document ``{"faults": [{"stage", "attempt", "fault"}, ...]}``."""
        if not isinstance(doc, Mapping):
            raise ScenarioError(
                f"{source}: expected a mapping with a 'faults' list, got {type(doc).__name__}; "
                'write {"faults": [{"stage": "train", "fault": "preempt@30"}]}'
            )
        unknown = sorted(set(doc) - {"faults"})
        if unknown:
            raise ScenarioError(f"{source}: unknown top-level key(s) {unknown}; the only key is 'faults'")
        entries = doc.get("faults") or []
        if not isinstance(entries, list):
            raise ScenarioError(f"{source}: 'faults' must be a list of entries, got {type(entries).__name__}")
        return cls(
            tuple(_fault_from_entry(entry, f"{source}: faults[{i}]") for i, entry in enumerate(entries))
        )

    @classmethod
    def loads(cls, text: str, *, source: str = "scenario") -> Scenario:
        """From JSON or YAML text (YAML is a superset of JSON; safe_load only)."""
        import yaml

        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ScenarioError(f"{source}: not valid YAML/JSON ({exc}); fix the syntax") from exc
        return cls.from_document(doc if doc is not None else {}, source=source)

    @classmethod
    def load(cls, path: str | Path) -> Scenario:
        path = Path(path)
        return cls.loads(path.read_text(encoding="utf-8"), source=str(path))

    def to_document(self) -> dict[str, Any]:
        """The file form; ``Scenario.from_document(s.to_document()) == s``."""
        out = []
        for fault in self.faults:
            entry: dict[str, Any] = {"stage": fault.stage, "fault": fault.body()}
            if fault.attempt is not None:
                entry["attempt"] = fault.attempt
            if fault.run is not None:
                entry["run"] = fault.run
            out.append(entry)
        return {"faults": out}

    def __add__(self, other: Scenario) -> Scenario:
        return Scenario(self.faults + other.faults)

    # -- queries -------------------------------------------------------------------------------

    def for_workload(self, stage: str, attempt: int | None, run: str | None = None) -> list[Fault]:
        """The faults that apply to one workload, in order (drop-events excluded: the event
        shim applies those, not the simulator). ``run`` is the workload's run label."""
        return [f for f in self.faults if f.kind != "drop-events" and f.matches(stage, attempt, run)]

    def train_data(self, attempt: int | None = None, run: str | None = None) -> TrainSplit:
        """The train split a train attempt of ``run`` reads (:func:`train_data`)."""
        return train_data(self.for_workload("train", attempt, run))

    def first(
        self, kinds: str | tuple[str, ...], stage: str, attempt: int | None, run: str | None = None
    ) -> Fault | None:
        wanted = (kinds,) if isinstance(kinds, str) else kinds
        return next((f for f in self.for_workload(stage, attempt, run) if f.kind in wanted), None)

    def drops_events_for(
        self, stage_or_object: str, attempt: int | None = None, run: str | None = None
    ) -> bool:
        """Should the GCS notification for this object (or any object of this stage) be lost?

        The simulator cannot drop notifications itself (fake-gcs-server sends them), so the
        event shim asks here. An object name is mapped to its stage by MaxText's file names;
        names that belong to no stage are never dropped; a run-scoped fault drops only when
        ``run`` (the writer's run label) is given and equal."""
        stage = stage_or_object if stage_or_object in STAGES else stage_of_object(stage_or_object)
        if stage is None:
            return False
        return any(f.kind == "drop-events" and f.matches(stage, attempt, run) for f in self.faults)


# --------------------------------------------------------------------------- parsing


_STAGE_HELP = f"stages are {', '.join(STAGES)}"
_SYNTAX_HELP = "faults are " + ", ".join(FAULT_SYNTAX) + "; the train data is " + ", ".join(DATA_SYNTAX)


def parse_fault(spec: str) -> Fault:
    """Parse ``<stage>[:<attempt>]:<fault>`` or ``drop-events:<stage>``."""
    if not isinstance(spec, str) or not spec.strip():
        raise ScenarioError(f"{spec!r}: empty fault; write e.g. 'train:1:preempt@30' or 'convert:oom'")
    text = spec.strip()
    where = repr(text)
    if text.startswith("drop-events:"):
        stage = text.split(":", 1)[1]
        return Fault("drop-events", _stage(stage, where), None)
    head, sep, rest = text.partition(":")
    if not sep:
        raise ScenarioError(
            f"{where}: no stage; write '<stage>[:<attempt>]:<fault>', e.g. 'train:{text}' ({_STAGE_HELP})"
        )
    stage = _stage(head, where)
    attempt: int | None = None
    first, sep, remainder = rest.partition(":")
    if first.isdigit():
        attempt = _attempt(int(first), where)
        rest = remainder
        if not sep or not rest:
            raise ScenarioError(f"{where}: attempt {first} but no fault after it; {_SYNTAX_HELP}")
    return parse_fault_body(rest, stage=stage, attempt=attempt, where=where)


def parse_fault_body(body: str, *, stage: str, attempt: int | None, where: str) -> Fault:
    """Parse the fault itself (``preempt@30``, ``exit:3``...) for a known stage and attempt."""
    body = body.strip()
    kind, _, arg = body.partition(":")
    kind, at, step_text = kind.partition("@")
    if kind not in FAULT_KINDS and kind not in DATA_KINDS:
        suggestion = _close(kind)
        hint = f"did you mean {suggestion!r}? " if suggestion else ""
        raise ScenarioError(f"{where}: unknown fault {body!r}; {hint}{_SYNTAX_HELP}")
    if kind == "preempt":
        return _preempt(stage, attempt, step_text if at else "0", arg, where)
    if kind == "evict":
        return _evict(stage, attempt, step_text if at else "0", arg, where)
    if kind == "hold":
        if stage != "train" or not at or not step_text.isdigit() or int(step_text) < 1:
            raise ScenarioError(
                f"{where}: hold pauses training at a step: write 'train:hold@<step>', step >= 1"
            )
        return Fault("hold", stage, attempt, step=int(step_text))
    if at:
        raise ScenarioError(f"{where}: only preempt, evict and hold take '@<step>'; {_SYNTAX_HELP}")
    if kind == "unschedulable":
        seconds = _number(arg, where, "unschedulable:<seconds>", minimum=0.0)
        return Fault("unschedulable", stage, attempt, seconds=seconds)
    if kind == "exit":
        if arg == "0":
            raise ScenarioError(f"{where}: exit:0 is a success, not a fault; use a code from 1 to 255")
        code = int(_number(arg, where, "exit:<code>", minimum=1, integer=True))
        if code > 255:
            raise ScenarioError(f"{where}: exit code {code} is out of range; use 1..255")
        return Fault("exit", stage, attempt, code=code)
    if kind == "api-5xx":
        count = int(_number(arg, where, "api-5xx:<n>", minimum=1, integer=True))
        return Fault("api-5xx", stage, attempt, count=count)
    if kind in DATA_KINDS:
        if stage != "train":
            raise ScenarioError(f"{where}: {kind} describes the train split; write it for stage train")
        count = int(_number(arg, where, f"{kind}:<n>", minimum=0, integer=True))
        return Fault(kind, stage, attempt, count=count)
    if arg:  # oom, image-pull, stall, drop-events, provision-fail, no-quota
        raise ScenarioError(f"{where}: {kind} takes no argument (got {arg!r}); write just '{kind}'")
    return Fault(kind, stage, attempt)


def _preempt(stage: str, attempt: int | None, step_text: str, modifiers: str, where: str) -> Fault:
    if not step_text.isdigit():
        raise ScenarioError(f"{where}: preempt needs a step number, e.g. 'preempt@30' (0 = at start)")
    target: str | None = None
    by = "kubelet"
    head_first = False
    for word in filter(None, modifiers.split(":")):
        if word in ("head", "worker"):
            target = word
        elif word in DISRUPTION_REASONS:
            by = word
        elif word == "head-first":
            head_first = True
        else:
            raise ScenarioError(
                f"{where}: unknown preempt modifier {word!r}; use head or worker (which pod of a "
                f"JobSet), {', '.join(DISRUPTION_REASONS)} (who disrupts it), or head-first"
            )
    if target and stage != "train":
        raise ScenarioError(
            f"{where}: ':{target}' only applies to the training JobSet; remove it for {stage}"
        )
    if head_first and (stage != "train" or target == "head"):
        raise ScenarioError(
            f"{where}: ':head-first' is the race of a worker's Job with the head's; train only"
        )
    return Fault("preempt", stage, attempt, step=int(step_text), target=target, by=by, head_first=head_first)


def _evict(stage: str, attempt: int | None, step_text: str, modifiers: str, where: str) -> Fault:
    if not step_text.isdigit():
        raise ScenarioError(f"{where}: evict needs a step number, e.g. 'evict@30' (0 = at start)")
    words = [w for w in modifiers.split(":") if w]
    if len(words) > 1 or (words and words[0] not in EVICTION_WHY):
        raise ScenarioError(
            f"{where}: unknown evict reason {':'.join(words)!r}; use one of {', '.join(EVICTION_WHY)}"
        )
    return Fault("evict", stage, attempt, step=int(step_text), why=words[0] if words else None)


def _fault_from_entry(entry: Any, where: str) -> Fault:
    if isinstance(entry, str):
        return parse_fault(entry)
    if not isinstance(entry, Mapping):
        raise ScenarioError(
            f'{where}: expected a mapping like {{"stage": "train", "fault": "oom"}} '
            f"or a string like 'train:oom', got {type(entry).__name__}"
        )
    unknown = sorted(set(entry) - set(ENTRY_KEYS))
    if unknown:
        raise ScenarioError(f"{where}: unknown key(s) {unknown}; entries have {', '.join(ENTRY_KEYS)}")
    body = entry.get("fault")
    if not isinstance(body, str) or not body:
        raise ScenarioError(f"{where}: 'fault' is required and must be a string; {_SYNTAX_HELP}")
    attempt = entry.get("attempt")
    if attempt is not None and (isinstance(attempt, bool) or not isinstance(attempt, int)):
        raise ScenarioError(f"{where}: 'attempt' must be a whole number >= 1 or omitted (= every attempt)")
    if attempt is not None:
        attempt = _attempt(attempt, where)
    run = _run(entry.get("run"), where)
    if body.startswith("drop-events:"):
        if entry.get("stage") is not None or attempt is not None:
            raise ScenarioError(f"{where}: write either 'drop-events:<stage>' alone or stage + 'drop-events'")
        return replace(parse_fault(body), run=run)
    if entry.get("stage") is None:
        raise ScenarioError(f"{where}: 'stage' is required; {_STAGE_HELP}")
    fault = parse_fault_body(body, stage=_stage(entry["stage"], where), attempt=attempt, where=where)
    return replace(fault, run=run)


def _run(value: Any, where: str) -> str | None:
    """The optional ``run`` of an entry: a run id, as the ``rlpipe.dev/run`` label holds it."""
    if value is None:
        return None
    if not isinstance(value, str) or not _LABEL_VALUE.match(value):
        raise ScenarioError(
            f"{where}: 'run' must be a run id as in the workload's rlpipe.dev/run label "
            f"(a label value: 1-63 letters, digits, '-', '_' or '.'), got {value!r}; omit it for every run"
        )
    return value


def _stage(value: Any, where: str) -> str:
    if value not in STAGES:
        raise ScenarioError(f"{where}: unknown stage {value!r}; {_STAGE_HELP}")
    return str(value)


def _attempt(value: int, where: str) -> int:
    if value < 1:
        raise ScenarioError(
            f"{where}: attempt {value} is invalid; attempts count from 1 (omit it for every attempt)"
        )
    return value


def _number(text: str, where: str, syntax: str, *, minimum: float, integer: bool = False) -> float:
    pattern = r"\d+" if integer else r"\d+(\.\d+)?"
    if not re.fullmatch(pattern, text or ""):
        raise ScenarioError(
            f"{where}: expected {syntax} with a {'whole ' if integer else ''}number, got {text!r}"
        )
    value = float(text)
    if value < minimum:
        raise ScenarioError(f"{where}: {syntax} must be >= {minimum:g}")
    return value


def _close(word: str) -> str | None:
    import difflib

    match = difflib.get_close_matches(word, FAULT_KINDS + DATA_KINDS, n=1, cutoff=0.6)
    return match[0] if match else None


def dumps(scenario: Scenario) -> str:
    return json.dumps(scenario.to_document(), indent=2)
