"""The real lm-evaluation-harness (0.4.13, the serving tier's) measures the base model and the real
export of the tiny Gemma 4 on a task defined from a local file (no Hub download), and rlpipe's
reader (``rlpipe.publisher.benchmarks``) reads what it wrote: each score is recounted here from the
harness's own logged samples, without the reader."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlpipe.publisher import benchmarks
from tests.harness.serving import serving_python
from tests.programs.test_serving_real_export import _base, _export_copy

pytestmark = pytest.mark.slow

# Six two-way choices: a task scored by log-likelihood, so even a model of random weights gets a
# score that is neither 0 nor 1 by design, and two models differ.
DOCS = [
    ("What is 3 + 4?", ["7", "8"], 0),
    ("What is 2 + 2?", ["5", "4"], 1),
    ("What is 5 + 1?", ["6", "9"], 0),
    ("What is 1 + 8?", ["3", "9"], 1),
    ("Name a primary color.", ["red", "table"], 0),
    ("Which is an animal?", ["stone", "cat"], 1),
]
TASK = "rlpipe_pick"


def _task(folder: Path) -> Path:
    folder.mkdir(parents=True)
    data = folder / "pick.jsonl"
    data.write_text("".join(json.dumps({"question": q, "choices": c, "gold": g}) + "\n" for q, c, g in DOCS))
    (folder / f"{TASK}.yaml").write_text(
        f"task: {TASK}\n"
        "dataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {data}\n"
        "test_split: test\n"
        "output_type: multiple_choice\n"
        'doc_to_text: "Question: {{question}}\\nAnswer:"\n'
        'doc_to_choice: "{{choices}}"\n'
        'doc_to_target: "{{gold}}"\n'
        "metric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n"
    )
    return folder


def _harness(model: Path, tasks: Path, out: Path) -> Path:
    lm_eval = serving_python().parent / "lm_eval"
    done = subprocess.run(
        [
            *(str(lm_eval), "--model", "hf", "--model_args", f"pretrained={model},dtype=float32"),
            *("--tasks", TASK, "--include_path", str(tasks), "--output_path", str(out)),
            *("--log_samples", "--batch_size", "1", "--device", "cpu"),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    tmp = tmp_path_factory.mktemp("harness")
    tasks = _task(tmp / "tasks")
    yield {
        "base": _harness(_base(tmp / "b"), tasks, tmp / "out-base"),
        "trained": _harness(_export_copy(tmp / "t"), tasks, tmp / "out-trained"),
    }


def _recount(out: Path) -> dict[int, float]:
    """Each document's acc from the raw samples file: the choice of highest log-likelihood, against
    the gold index the harness recorded as the target."""
    (path,) = out.rglob(f"samples_{TASK}_*.jsonl")
    marks = {}
    for line in path.read_text().splitlines():
        row: dict[str, Any] = json.loads(line)
        liks = [float(r[0]) for r in row["filtered_resps"]]
        marks[row["doc_id"]] = float(liks.index(max(liks)) == int(row["target"]))
    return marks


def test_the_reader_gives_the_harness_scores_each_recounted_from_its_samples(runs: dict[str, Path]) -> None:
    for out in runs.values():
        read = benchmarks.read_folder(out)
        assert read.harness == "0.4.13"
        score = read.score(TASK, "acc")
        assert score is not None and score.samples == len(DOCS) and score.higher_is_better is True
        marks = _recount(out)
        assert score.value == pytest.approx(sum(marks.values()) / len(DOCS))
        assert {s.doc_id: s.scores["acc"] for s in read.samples} == marks
        assert [s.prompt for s in sorted(read.samples, key=lambda s: s.doc_id)] == [
            f"Question: {q}\nAnswer:" for q, _, _ in DOCS
        ], "the prompts are the local file's, as the task's template makes them"


def test_base_against_trained_gives_each_delta_and_the_documents_that_changed(runs: dict[str, Path]) -> None:
    base, trained = (benchmarks.read_folder(runs[k]) for k in ("base", "trained"))
    before, after = _recount(runs["base"]), _recount(runs["trained"])
    (row,) = benchmarks.compare(base, trained)
    assert (row.task, row.metric) == (TASK, "acc")
    assert row.delta == pytest.approx((sum(after.values()) - sum(before.values())) / len(DOCS))
    assert row.better is (row.delta > 0)
    changed = benchmarks.changed(base, trained, "acc")
    assert sorted(t.doc_id for _, t in changed) == sorted(d for d in after if after[d] != before[d])
    for b, t in changed:
        chosen = t.response.strip()
        assert chosen in DOCS[t.doc_id][1], "the response is the continuation the model chose"
        assert (chosen == DOCS[t.doc_id][1][DOCS[t.doc_id][2]]) == (t.scores["acc"] == 1.0)
        assert b.doc_id == t.doc_id
