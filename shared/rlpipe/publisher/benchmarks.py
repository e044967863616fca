"""What lm-evaluation-harness measured, read from the files it writes, and base against trained.

The harness (``lm_eval ... --output_path DIR --log_samples``) writes, per model, a
``results_<time>.json`` (each task's metrics, as ``"<metric>,<filter>"`` keys beside
``"<metric>_stderr,<filter>"``, with ``higher_is_better`` and ``n-samples``) and a
``samples_<task>_<time>.jsonl`` per task (each document, the request the harness made, the model's
responses and each metric's score for it). This module reads those as written, so that the card,
the report and ``compare`` show the harness's own numbers, and the completions that changed
between the base and the trained model are the harness's logged ones.

Why a reader of files and not the harness's Python API: the harness runs where the model is
served (the serving tier here; a serving workload in production), and what crosses to rlpipe is
what it wrote. ``tests/programs/test_serving_harness.py`` holds this reader to the real harness's
output, recounting each score from the samples.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Score:
    task: str
    metric: str
    filter: str
    value: float
    stderr: float | None
    higher_is_better: bool | None
    samples: int | None  # the documents scored ("n-samples": effective)


@dataclass(frozen=True)
class Sample:
    task: str
    doc_id: int
    prompt: str
    target: str
    response: str  # generated text, or the continuation a multiple-choice task's model chose
    scores: Mapping[str, float]


@dataclass(frozen=True)
class Benchmark:
    harness: str  # lm_eval_version
    model: str
    scores: tuple[Score, ...]
    samples: tuple[Sample, ...]

    def score(self, task: str, metric: str) -> Score | None:
        return next((s for s in self.scores if s.task == task and s.metric == metric), None)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        out = float(value)
    except ValueError:
        return None
    return out if math.isfinite(out) else None


def _scores(results: Mapping[str, Any]) -> list[Score]:
    better = results.get("higher_is_better") or {}
    counts = results.get("n-samples") or {}
    out = []
    for task, fields in (results.get("results") or {}).items():
        for key, raw in fields.items():
            metric, _, filt = key.partition(",")
            if not filt or metric.endswith("_stderr"):  # name, alias, sample_len have no filter
                continue
            value = _number(raw)
            if value is None:
                continue
            hib = (better.get(task) or {}).get(metric)
            n = (counts.get(task) or {}).get("effective")
            out.append(
                Score(
                    task=task,
                    metric=metric,
                    filter=filt,
                    value=value,
                    stderr=_number(fields.get(f"{metric}_stderr,{filt}")),
                    higher_is_better=hib if isinstance(hib, bool) else None,
                    samples=n if isinstance(n, int) and not isinstance(n, bool) else None,
                )
            )
    return out


def _response(line: Mapping[str, Any]) -> str:
    """The text the model answered: a generation's first filtered response, or, for a task scored
    by log-likelihood over choices, the continuation with the highest one."""
    filtered = line.get("filtered_resps") or []
    if filtered and isinstance(filtered[0], str):
        return filtered[0]
    liks = [_number(r[0]) if isinstance(r, list) and r else None for r in filtered]
    if not liks or any(v is None for v in liks):
        return ""
    chosen = max(range(len(liks)), key=lambda i: liks[i] or 0.0)
    args = (line.get("arguments") or {}).get(f"gen_args_{chosen}") or {}
    return str(args.get("arg_1", ""))


def _sample(task: str, line: Mapping[str, Any]) -> Sample:
    metrics = [m for m in line.get("metrics") or [] if isinstance(m, str)]
    first = (line.get("arguments") or {}).get("gen_args_0") or {}
    return Sample(
        task=task,
        doc_id=int(line.get("doc_id", -1)),
        prompt=str(first.get("arg_0", "")),
        target=str(line.get("target", "")),
        response=_response(line),
        scores={m: v for m in metrics if (v := _number(line.get(m))) is not None},
    )


def read(results: Mapping[str, Any], samples: Mapping[str, Sequence[Mapping[str, Any]]]) -> Benchmark:
    """One model's run of the harness: its results document and each task's logged samples."""
    return Benchmark(
        harness=str(results.get("lm_eval_version", "")),
        model=str(results.get("model_name", "")),
        scores=tuple(_scores(results)),
        samples=tuple(_sample(task, line) for task, lines in samples.items() for line in lines),
    )


def read_folder(folder: Path) -> Benchmark:
    """What the harness wrote under ``--output_path`` for one model: its newest results file, and
    each task's samples of the same run (the file names end with the run's time)."""
    found = sorted(folder.rglob("results_*.json"))
    if not found:
        raise FileNotFoundError(f"no results_*.json under {folder}: did lm_eval run with --output_path?")
    newest = found[-1]
    stamp = newest.name.removeprefix("results_").removesuffix(".json")
    results = json.loads(newest.read_text())
    samples = {
        task: [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        for task in results.get("results") or {}
        for path in newest.parent.glob(f"samples_{task}_{stamp}.jsonl")
    }
    return read(results, samples)


@dataclass(frozen=True)
class Row:
    task: str
    metric: str
    base: float
    trained: float
    delta: float
    better: bool | None  # None: the harness does not say which way is better


def compare(base: Benchmark, trained: Benchmark) -> list[Row]:
    """Each metric both runs measured, trained against base."""
    rows = []
    for t in trained.scores:
        b = base.score(t.task, t.metric)
        if b is None:
            continue
        delta = t.value - b.value
        better = None if t.higher_is_better is None else (delta > 0) == t.higher_is_better and delta != 0
        rows.append(Row(t.task, t.metric, b.value, t.value, delta, better))
    return rows


def changed(base: Benchmark, trained: Benchmark, metric: str) -> list[tuple[Sample, Sample]]:
    """The documents whose score on ``metric`` changed, (base, trained), most improved first."""
    before = {(s.task, s.doc_id): s for s in base.samples}
    pairs = [
        (before[(s.task, s.doc_id)], s)
        for s in trained.samples
        if (s.task, s.doc_id) in before
        and metric in s.scores
        and metric in before[(s.task, s.doc_id)].scores
        and s.scores[metric] != before[(s.task, s.doc_id)].scores[metric]
    ]
    return sorted(pairs, key=lambda p: (-(p[1].scores[metric] - p[0].scores[metric]), p[1].task, p[1].doc_id))
