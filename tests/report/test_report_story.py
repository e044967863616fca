"""`rlpipe report` tells a retried, published run's whole story (issue 26).

One run, built as the ledger records it: round 1 converts, is preempted, resumes and fails; a
person retries it; round 2 resumes training from the last checkpoint, exports and publishes. It
trained on GSM8K's train split and evaluated on its test split, each at the commit plan pinned, and
scored the rollouts with the request's own reward functions. The page must say what it trained and
evaluated on at which commit, which reward functions scored it with the reward file's sha256, who retried it and why, where training resumed, where the model was published and at
which commit, where the converted checkpoint came from in each round, that the CPU stages held no
TPU, and which attempt printed each evaluation. ``story()`` is also what the browser test renders
(``tests/report/test_report_chromium.py``).
"""

from __future__ import annotations

import hashlib
import json
import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rlpipe import report
from rlpipe.cli import charts as cli_charts
from rlpipe.cli import report_command
from rlpipe.core.runs.record import LEDGER_TIME, RunRecord
from rlpipe.core.teams import Teams
from tests.report.test_report import SVG, Page, by_id, charts, texts

T0 = datetime(2026, 6, 2, 7, 0, tzinfo=UTC)
NOW = T0 + timedelta(hours=14)
RUN = "rstory000001"
REPO, BRANCH = "acme/gemma-4-26b-rl", "main"
COMMIT = "4f1c2b9e8d7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c"
CALLER = "rlpipe-operator@acme-ml.iam.gserviceaccount.com"
REASON = "learning-rate override fixed; spot capacity is back"
FAILURE = {
    "tag": "permanent",
    "message": "train_rl exited 1: loss is NaN at step 118",
    "stage": "train",
    "attempt": 2,
}
DATA_SHA = "5c1e8f0a2b3d4c5e6f708192a3b4c5d6e7f80912"
REWARD_SHA = hashlib.sha256(b"def exact_match(prompts, completions, **kwargs): ...").hexdigest()
TEMPLATE_SHA = hashlib.sha256(b'{"SYSTEM_PROMPT": "", "TEMPLATE": "{question}"}').hexdigest()
REWARD_COPY = f"gs://acme-artifacts/runs/{RUN}/inputs/rewards.py"


def _split(split: str, files: list[tuple[str, int]], examples: int | None) -> dict[str, Any]:
    """One split as plan pins it (``control.lifecycle.data_pins``: lineage.data's train/eval entries)."""
    return {
        "repo": "openai/gsm8k",
        "revision": "main",
        "sha": DATA_SHA,
        "subset": "main",
        "split": split,
        "files": [{"path": p, "size": n, "sha256": "d4" * 32} for p, n in files],
        "num_examples": examples,
        "features": {"question": "string", "answer": "string"},
        "gated": False,
    }


DATA = {
    "train": _split(
        "train",
        [("main/train-00000-of-00002.parquet", 1_500_000), ("main/train-00001-of-00002.parquet", 806_545)],
        7473,
    ),
    "eval": _split("test", [("main/test-00000-of-00001.parquet", 419_088)], 1319),
}
INPUTS = {
    "rewards": {
        "uri": REWARD_COPY,
        "sha256": REWARD_SHA,
        "size": 52,
        "source": "rewards.py",
        "functions": ["exact_match", "brevity"],
    },
    "chat_template": {
        "uri": f"gs://acme-artifacts/runs/{RUN}/inputs/chat_template.json",
        "sha256": TEMPLATE_SHA,
        "size": 45,
        "source": "inline in the request",
    },
}
# (attempt, step, mean_reward, accuracy): attempt 2 resumed from step 50 and evaluates step 75
# again; attempt 3 (round 2) resumed from step 100 and evaluates step 100 again.
EVALS = [
    (1, 25, 0.21, 22.0),
    (1, 50, 0.27, 26.5),
    (1, 75, 0.31, 30.0),
    (2, 75, 0.30, 29.0),
    (2, 100, 0.36, 34.5),
    (3, 100, 0.37, 35.0),
    (3, 125, 0.44, 41.0),
    (3, 150, 0.52, 47.5),
    (3, 175, 0.58, 52.0),
    (3, 200, 0.63, 55.5),
]


def ts(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).strftime(LEDGER_TIME)


def _attempt(
    stage: str, n: int, rnd: int, start: float, end: float, phase: str, **extra: Any
) -> dict[str, Any]:
    return {
        "stage": stage,
        "attempt": n,
        "workload": f"{RUN}-{stage}-a{n}",
        "launched_at": ts(start),
        "finished_at": ts(end),
        "phase": phase,
        "failure_class": None,
        "reason": None,
        "resume_step": None,
        "chip_hours": 0.0,
        "round": rnd,
        **extra,
    }


def _eval(mean_reward: float, accuracy: float) -> dict[str, Any]:
    return {
        "corr": accuracy,
        "total": 100,
        "accuracy": accuracy,
        "partial_accuracy": accuracy,
        "format_accuracy": 98.0,
        "mean_reward": mean_reward,
    }


def story(**overrides: Any) -> dict[str, Any]:
    """A retried, published run, validated by today's ``RunRecord`` and dumped as the CLI does."""
    base: dict[str, Any] = {
        "run_id": RUN,
        "key": "request:gemma-rl-june",
        "source": {
            "kind": "gcs",
            "bucket": "acme-requests",
            "name": "requests/gemma.yaml",
            "generation": "7",
        },
        "request": {
            "model": "gemma4-26b",
            "hf_repo": "google/gemma-4-26b-a4b-it",
            "hf_revision": "main",
            "placement": "cpu",
            "image": "us-docker.pkg.dev/cloud-tpu-images/maxtext-images/tpu_post_training:0.2.4",
            "publish": {"repo": REPO, "branch": BRANCH},
            "labels": {"team": "post-training"},
            "dataset": {
                "repo": "openai/gsm8k",
                "revision": "main",
                "subset": "main",
                "train_split": "train",
                "eval_split": "test",
            },
            "rewards": {
                "file": {"path": REWARD_COPY, "inline": None, "sha256": REWARD_SHA},
                "functions": ["exact_match", "brevity"],
            },
            "chat_template": {"path": INPUTS["chat_template"]["uri"], "inline": None, "sha256": TEMPLATE_SHA},
        },
        "state": "succeeded",
        "stage": "publish",
        "attempt": 1,
        "attempts": [
            _attempt("convert", 1, 1, 0, 25, "succeeded"),
            _attempt(
                "train",
                1,
                1,
                26,
                140,
                "failed",
                failure_class="preempted",
                reason="Spot node reclaimed",
                chip_hours=30.4,
            ),
            _attempt(
                "train",
                2,
                1,
                142,
                200,
                "failed",
                failure_class="permanent",
                reason=FAILURE["message"],
                resume_step=50,
                chip_hours=15.47,
            ),
            _attempt("train", 3, 2, 402, 600, "succeeded", resume_step=100, chip_hours=105.6),
            _attempt("export", 1, 2, 601, 640, "succeeded"),
            _attempt("publish", 1, 2, 641, 650, "succeeded"),
        ],
        "lineage": {
            "hf_repo": "google/gemma-4-26b-a4b-it",
            "hf_revision": "main",
            "hf_sha": "0123456789abcdef0123456789abcdef01234567",
            "conversion_key": "conv-5f2a",
            # Round 2's plan found this run's own round-1 conversion in the cache.
            "conversion_cache_hit": True,
            "converted_uri": f"gs://acme-artifacts/cache/conversions/conv-5f2a/{RUN}-a1/",
            "checkpoint_uri": f"gs://acme-artifacts/runs/{RUN}/trained/",
            "export_uri": f"gs://acme-artifacts/runs/{RUN}/hf/",
            "published_to": f"{REPO}@{BRANCH}",
            "final_step": 200,
            "data": DATA,
            "inputs": INPUTS,
        },
        "results": {
            "pre": _eval(0.1234, 12.5),
            "post": _eval(0.6421, 56.25),
            "intermediate": [
                {"step": s, "mean_reward": r, "accuracy": a, "attempt": n} for n, s, r, a in EVALS
            ],
            "final_step": 200,
        },
        "round": 2,
        "rounds": [
            {
                "round": 2,
                "by": "alice",
                "caller": CALLER,
                "at": ts(400),
                "from_stage": "train",
                "reason": REASON,
                "key": "call:0b8e6f3c9a2d4e1f8a7b6c5d4e3f2a1b",
                "previous_state": "failed",
                "previous_failure": FAILURE,
            }
        ],
        "created_at": ts(0),
        "updated_at": ts(651),
    }
    return RunRecord.model_validate({**base, **overrides}).model_dump(mode="json")


def as_record(data: dict[str, Any]) -> RunRecord:
    """The record as the ledger loads it (``Ledger.get``), which is what the report reads."""
    return RunRecord.model_validate(data)


def receipt(**overrides: Any) -> dict[str, Any]:
    """What the publish Job wrote (``rlpipe.publisher.program.write_receipt``)."""
    return {
        "run_id": RUN,
        "request_id": None,
        "repo": REPO,
        "branch": BRANCH,
        "outcome": "published",
        "commit": COMMIT,
        "files": {"model.safetensors": 1024, "config.json": 10, "README.md": 300},
        **overrides,
    }


def shown(html: str) -> str:
    """The page's text as a reader sees it: the parser's joins before punctuation removed."""
    return re.sub(r" ([,.;:)])", r"\1", Page(html).all_text)


@pytest.fixture(scope="module")
def html() -> str:
    return report.render_report(as_record(story()), now=NOW, receipt=receipt(), painter=cli_charts)


def test_the_key_facts_say_rounds_result_and_where_it_was_published(html: str) -> None:
    text = shown(html)
    assert f"rounds 2: retried once (round 2 by alice: {REASON})" in text
    assert f"published {REPO} branch {BRANCH}, commit {COMMIT}" in text
    assert "post mean_reward 0.6421 (+0.5187 over pre)" in text
    assert "commit from the publish receipt (published)" in text


def test_each_round_says_who_asked_why_how_the_last_ended_and_where_training_resumed(html: str) -> None:
    rows = report.rounds(as_record(story()), report.attempt_rows(as_record(story()), NOW))
    assert [r.number for r in rows] == [1, 2]
    first, second = rows
    assert first.asked == "a request file in the requests bucket"
    assert first.training == "train #1 started from step 0"
    assert first.ended == (
        "failed: [permanent] train_rl exited 1: loss is NaN at step 118 in train attempt 2"
    )
    assert first.attempts == "convert #1, train #1, train #2"
    assert first.chip_hours == pytest.approx(45.87)
    assert second.asked == f"retry by alice (verified caller {CALLER})"
    assert (second.reason, second.from_stage) == (REASON, "train")
    assert second.training == "train #3 resumed from step 100"
    assert second.ended == "succeeded"
    assert second.attempts == "train #3, export #1, publish #1"
    # The same facts are in the page's rounds table.
    text = Page(html).all_text
    assert f"retry by alice (verified caller {CALLER}) {REASON} train train #3 resumed from step 100" in text


def test_a_retry_is_a_marked_line_on_the_timeline_not_an_unexplained_gap(html: str) -> None:
    timeline = charts(html)["timeline"]
    line = by_id(timeline, "timeline-round-2")
    idle = by_id(timeline, "timeline-round-2-idle")
    assert "round 2: retry by alice" in texts(timeline)

    def xs(element: ET.Element) -> list[float]:
        path = element.find(f"{SVG}path")
        assert path is not None
        return [float(x) for x in re.findall(r"[ML] ([-\d.]+) ", path.get("d", ""))]

    def bar_x(gid: str) -> tuple[float, float]:
        found = xs(by_id(timeline, f"timeline-attempt-{gid}"))
        return min(found), max(found)

    # The shaded span runs from the end of round 1's last attempt to the retry's line, and the
    # retry's first attempt starts right of the line.
    assert min(xs(idle)) == pytest.approx(bar_x("train-2")[1], abs=0.05)
    assert max(xs(idle)) == pytest.approx(min(xs(line)), abs=0.05)
    assert bar_x("train-3")[0] >= min(xs(line))
    # Bars name their round once the run has more than one.
    assert "train #3 · round 2" in texts(timeline)


@pytest.mark.parametrize("hit", [True, False, None])
def test_a_conversion_of_round_one_is_explained_in_round_two(hit: bool | None) -> None:
    data = story(lineage={**story()["lineage"], "conversion_cache_hit": hit})
    text = Page(report.render_report(as_record(data), now=NOW, painter=cli_charts)).all_text
    assert (
        "conversion converted by this run: convert #1 in round 1; round 2 reused it (no conversion)" in text
    )
    assert "cache hit: no" not in text and "conversion cache hit" not in text


def test_a_conversion_from_another_run_is_named() -> None:
    lineage = {
        **story()["lineage"],
        "converted_uri": "gs://acme-artifacts/cache/conversions/conv-5f2a/rother000009-a2/",
    }
    attempts = [a for a in story()["attempts"] if a["stage"] != "convert"]
    data = story(lineage=lineage, attempts=attempts)
    rows = report.attempt_rows(as_record(data), NOW)
    assert report.conversion(as_record(data), rows) == (
        "cache hit: loaded run rother000009's conversion (its convert #2); this run converted nothing"
    )
    # This run converted too, but another run's conversion reached the cache first.
    data = story(lineage=lineage)
    assert "run rother000009's conversion (attempt 2) reached the cache first" in report.conversion(
        as_record(data), report.attempt_rows(as_record(data), NOW)
    )


def test_cpu_stages_say_no_tpu_and_tpu_attempts_without_a_reading_say_not_recorded(html: str) -> None:
    cells = {
        (r["data-stage"], int(r["data-attempt"])): r for r in Page(html).tags("tr") if "data-attempt" in r
    }
    assert set(cells) == {(a["stage"], a["attempt"]) for a in story()["attempts"]}
    chips = {(r.stage, r.attempt): r.chips for r in report.attempt_rows(as_record(story()), NOW)}
    assert chips == {
        ("convert", 1): "no TPU",
        ("train", 1): "30.40",
        ("train", 2): "15.47",
        ("train", 3): "105.60",
        ("export", 1): "no TPU",
        ("publish", 1): "no TPU",
    }
    page = Page(html)
    assert [a["data-chips"] for a in page.tags("td") if "data-chips" in a].count("no TPU") == 3
    text = page.all_text
    assert "recorded no chip-hours" not in text
    assert "convert, export, publish ran on the CPU pool: no TPU chip held." in text
    assert "convert CPU pool no TPU" in text and "train TPU slice 151.47" in text

    # A train attempt with no reading is "not recorded", and counted as such.
    attempts = [{**a, "chip_hours": None} if a["attempt"] == 3 else a for a in story()["attempts"]]
    rows = report.attempt_rows(as_record(story(attempts=attempts)), NOW)
    assert {(r.stage, r.attempt): r.chips for r in rows}[("train", 3)] == "not recorded"
    assert report.chip_hours(rows)["unknown"] == 1
    # In tpu-slice placement conversion holds chips: a zero is a reading, not "no TPU".
    request = {**story()["request"], "placement": "tpu-slice"}
    rows = report.attempt_rows(as_record(story(request=request)), NOW)
    assert {(r.stage, r.attempt): r.chips for r in rows}[("convert", 1)] == "0.00"
    # A record that does not say where a stage ran never claims "no TPU" for it.
    request = {k: v for k, v in story()["request"].items() if k != "placement"}
    rows = report.attempt_rows(as_record(story(request=request)), NOW)
    assert {(r.stage, r.attempt): r.on_tpu for r in rows}[("export", 1)] is None


def test_evaluations_are_a_series_per_attempt_and_a_re_evaluated_step_is_two_points(html: str) -> None:
    reward = charts(html)["reward"]
    for n in (1, 2, 3):
        count = sum(1 for a, *_ in EVALS if a == n)
        for series in ("mean-reward", "accuracy"):
            path = by_id(reward, f"reward-{series}-a{n}").find(f"{SVG}path")
            assert path is not None and len(re.findall(r"[ML] ", path.get("d", ""))) == count
    legend = texts(reward)
    for label in ("attempt 1 (round 1)", "attempt 2 (round 1)", "attempt 3 (round 2)"):
        assert legend.count(label) == 1
    # Each resume is a line labelled at its step.
    assert "attempt 2 (round 1) resumed from step 50" in legend
    assert "attempt 3 (round 2) resumed from step 100" in legend
    # Step 75 was evaluated by attempts 1 and 2: both are rows of the data table.
    rows = [
        (int(r["data-step"]), r["data-eval-attempt"])
        for r in Page(html).tags("tr")
        if "data-step" in r and "data-point" not in r
    ]
    assert rows == [(s, str(n)) for n, s, *_ in sorted(EVALS, key=lambda e: (e[1], e[0]))]
    assert rows.count((75, "1")) == rows.count((75, "2")) == 1


def test_evaluations_of_an_older_ledger_are_shown_as_attempt_not_recorded() -> None:
    results = {
        **story()["results"],
        "intermediate": [{"step": s, "mean_reward": r, "accuracy": a} for _, s, r, a in EVALS[:3]]
        + [{"step": 250, "mean_reward": 0.7, "accuracy": 60.0, "attempt": 3}],
    }
    html = report.render_report(as_record(story(results=results)), now=NOW, painter=cli_charts)
    reward = charts(html)["reward"]
    path = by_id(reward, "reward-mean-reward-unlabelled").find(f"{SVG}path")
    assert path is not None and len(re.findall(r"[ML] ", path.get("d", ""))) == 3
    assert "attempt not recorded" in texts(reward)
    by_id(reward, "reward-mean-reward-a3")
    attempts = [r["data-eval-attempt"] for r in Page(html).tags("tr") if "data-eval-attempt" in r]
    assert attempts.count("") >= 3


def _box(svg: ET.Element, element_id: str) -> tuple[float, float]:
    """The vertical extent (top, bottom) of an axes' background patch."""
    patch = by_id(svg, element_id).find(f"{SVG}g/{SVG}path")
    assert patch is not None
    ys = [float(y) for y in re.findall(r"[ML] [-\d.]+ ([-\d.]+)", patch.get("d", ""))]
    return min(ys), max(ys)


def _marker_y(svg: ET.Element, element_id: str) -> float:
    use = next(by_id(svg, element_id).iter(f"{SVG}use"))
    return float(use.get("y", "nan"))


@pytest.mark.parametrize("accuracy", [12.34, 56.25], ids=["pre-coincides", "post-coincides"])
def test_reward_and_accuracy_markers_sit_in_panels_of_their_own(accuracy: float) -> None:
    """On twin axes a reward and an accuracy whose scales coincide drew on one spot; in two
    panels each marker is inside its own panel, whatever the values."""
    results = {**story()["results"], "pre": _eval(0.1234, accuracy), "post": _eval(0.5625, accuracy)}
    reward = charts(report.render_report(as_record(story(results=results)), now=NOW, painter=cli_charts))[
        "reward"
    ]
    top, bottom = _box(reward, "reward-axes_1"), _box(reward, "reward-axes_2")
    assert top[1] < bottom[0]  # the mean_reward panel is above the accuracy panel, apart
    for name in ("pre", "post"):
        assert top[0] <= _marker_y(reward, f"reward-{name}") <= top[1]
        assert bottom[0] <= _marker_y(reward, f"reward-{name}-accuracy") <= bottom[1]
    labels = texts(reward)
    assert "pre 0.1234" in labels and f"pre {accuracy:.2f}%" in labels


def test_the_published_commit_comes_from_the_ledger_before_the_receipt() -> None:
    ledger_commit = "a" * 40
    data = story()
    data["lineage"]["published_commit"] = ledger_commit  # a field the ledger does not have yet
    shown = report.published(as_record(data), report.attempt_rows(as_record(data), NOW), receipt())
    assert shown is not None and (shown["commit"], shown["source"]) == (ledger_commit, "the ledger")


@pytest.mark.parametrize(
    "bad",
    [
        {"run_id": "rother000009"},
        {"repo": "someone/else"},
        {"branch": "dev"},
        {"outcome": "failed"},
        {"commit": "<b>not a sha</b>"},
        {"commit": None},
    ],
    ids=["other-run", "other-repo", "other-branch", "not-published", "not-hex", "no-commit"],
)
def test_a_receipt_that_is_not_this_runs_publish_gives_no_commit(bad: dict[str, Any]) -> None:
    html = report.render_report(as_record(story()), now=NOW, receipt=receipt(**bad), painter=cli_charts)
    text = shown(html)
    assert f"published {REPO} branch {BRANCH}, commit not recorded" in text
    assert "not recorded: the ledger has no commit and the publish receipt was not read" in text
    assert "not a sha" not in text


def test_a_run_that_has_not_published_says_so() -> None:
    attempts = [a for a in story()["attempts"] if a["stage"] != "publish"]
    data = story(attempts=attempts, state="exporting", stage="export")
    text = shown(report.render_report(as_record(data), now=NOW, receipt=receipt(), painter=cli_charts))
    assert f"published not published yet (to {REPO} branch {BRANCH})" in text
    assert COMMIT not in text
    failed = [*attempts, _attempt("publish", 1, 2, 641, 650, "failed", failure_class="permanent")]
    data = story(attempts=failed, state="failed")
    assert (
        "every publish attempt failed"
        in Page(report.render_report(as_record(data), now=NOW, painter=cli_charts)).all_text
    )


def test_the_receipt_is_read_only_when_the_ledger_lacks_the_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    """``rlpipe report`` reads the artifacts bucket only for a published run without a commit in
    its ledger; anything that goes wrong reading it leaves the commit unknown, not the page."""
    from rlpipe.control.adapters import blobstore

    reads: list[tuple[str, str]] = []
    stored: dict[str, Any] = {"receipt": receipt()}

    class Store:
        def __init__(self, client: Any, bucket: str) -> None:
            self.bucket = bucket

        def read(self, name: str) -> Any:
            reads.append((self.bucket, name))
            if isinstance(stored["receipt"], Exception):
                raise stored["receipt"]
            return blobstore.Blob(name=name, data=json.dumps(stored["receipt"]).encode(), generation=1)

    monkeypatch.setattr(blobstore, "BlobStore", Store)
    monkeypatch.setattr(blobstore, "make_client", lambda project: object())

    class Settings:
        project, artifacts_bucket = "acme-ml", "acme-artifacts"

        def teams(self) -> Teams:
            return Teams()  # none declared: the run's outputs are under runs/<id>/

    unpublished = story(attempts=[a for a in story()["attempts"] if a["stage"] != "publish"])
    assert report_command.read_receipt(Settings(), as_record(unpublished)) is None
    committed = story()
    committed["lineage"]["published_commit"] = COMMIT
    assert report_command.read_receipt(Settings(), as_record(committed)) is None
    assert not reads
    assert report_command.read_receipt(Settings(), as_record(story())) == receipt()
    assert reads == [("acme-artifacts", f"runs/{RUN}/publish/receipt.json")]
    stored["receipt"] = blobstore.NotFound("gone")
    assert report_command.read_receipt(Settings(), as_record(story())) is None


def test_a_retried_run_renders_without_a_round_record() -> None:
    """A ledger whose attempts name round 2 but whose rounds list is missing still has two rounds."""
    html = report.render_report(as_record(story(rounds=[])), now=NOW, painter=cli_charts)
    rows = {r["data-round"] for r in Page(html).tags("tr") if "data-round" in r and "id" in r}
    assert {"1", "2"} <= rows
    assert "retry by an unnamed person (no verified caller recorded)" in Page(html).all_text


def test_the_page_holds_no_idempotency_key(html: str) -> None:
    """The retry's key is the caller's idempotency token: of no use to a reader, kept off the page."""
    assert "0b8e6f3c9a2d4e1f8a7b6c5d4e3f2a1b" not in html


def test_the_rendered_story_is_a_run_record() -> None:
    """The story is today's ledger model, so the report is tested on what a ledger holds."""
    assert RunRecord.model_validate(story()).rounds[0].caller == CALLER


def test_ids_stay_unique_with_rounds_resumes_and_attempt_series(html: str) -> None:
    ids = [a["id"] for _, a in Page(html).elements if "id" in a]
    assert len(ids) == len(set(ids))
    assert {"timeline-round-2", "timeline-round-2-idle", "reward-resume-50", "reward-resume-100"} <= set(ids)


def test_the_data_and_rewards_block_names_each_split_at_its_commit_and_the_reward_files_hash(
    html: str,
) -> None:
    text = shown(html)
    rows = {r["data-role"] for r in Page(html).tags("tr") if "data-role" in r}
    assert rows == {"train", "eval"}
    assert f"training openai/gsm8k@{DATA_SHA} main main train 2 files, 2,306,545 bytes 7,473" in text, (
        "dataset@commit, revision, subset, split, files and bytes, examples"
    )
    assert f"evaluation openai/gsm8k@{DATA_SHA} main main test 1 file, 419,088 bytes 1,319" in text
    assert "reward functions the request's own: exact_match, brevity" in text
    assert f"reward file sha256 {REWARD_SHA}" in text and f"reward file {REWARD_COPY}" in text
    assert "dataset processor MaxText's built-in" in text
    assert (
        f"chat template sha256 {TEMPLATE_SHA}, gs://acme-artifacts/runs/{RUN}/inputs/chat_template.json"
        in text
    )
    # The story's request is not a whole request (an older ledger's): no expected step to compare.
    assert "final step trained to step 200" in text and "data ran out" not in text


def test_built_in_rewards_and_a_held_out_evaluation_are_named() -> None:
    request = {
        **story()["request"],
        "dataset": {
            "repo": "open-r1/OpenR1-Math-220k",
            "revision": "main",
            "subset": None,
            "train_split": "train",
            "eval_split": "test",
        },
    }
    del request["rewards"], request["chat_template"]
    train = {**DATA["train"], "repo": "open-r1/OpenR1-Math-220k", "subset": "default"}
    lineage = {**story()["lineage"], "data": {"train": train}, "inputs": None}
    text = shown(
        report.render_report(as_record(story(request=request, lineage=lineage)), now=NOW, painter=cli_charts)
    )
    assert (
        "reward functions MaxText's built-in: match_format_exactly, match_format_approximately, "
        "check_numbers (maxtext 0.2.4 train_rl.py:420-424)"
    ) in text
    assert (
        "evaluation 5% held out of the training split by train_rl (open-r1/OpenR1-Math-220k split train)"
        in text
    )
    assert f"training open-r1/OpenR1-Math-220k@{DATA_SHA} main default train" in text
    assert "reward file" not in text and "sha256" not in text
    from rlpipe.core.staging import BUILTIN_REWARDS

    assert all(name in text for name in BUILTIN_REWARDS), "the built-in functions, by name"


def test_a_dataset_not_pinned_yet_is_named_from_the_request() -> None:
    lineage = {**story()["lineage"], "data": None, "inputs": None}
    text = shown(report.render_report(as_record(story(lineage=lineage)), now=NOW, painter=cli_charts))
    assert "training openai/gsm8k@not pinned yet main main train not pinned yet" in text
    assert f"reward file sha256 {REWARD_SHA}" in text, "the ledger's request names the run's copy and hash"


def test_a_run_whose_data_ran_out_says_at_which_step_of_the_configs_it_ended() -> None:
    """``lineage.final_step`` against ``core.steps.final_step`` of the run's (validated) request."""
    from rlpipe.core import steps
    from rlpipe.core.request import validate_request
    from tests.conftest import minimal_request

    req = validate_request(minimal_request())
    expected = steps.final_step(req)
    request = req.model_dump(mode="json")
    for final, said in (
        (expected - 1, f"trained to step {expected - 1} of {expected}: the data ran out"),
        (expected, f"trained to step {expected}, the config's final step"),
    ):
        lineage = {**story()["lineage"], "final_step": final}
        page = Page(
            report.render_report(
                as_record(story(request=request, lineage=lineage)), now=NOW, painter=cli_charts
            )
        )
        assert f"final step {said}" in page.all_text
        assert ("the data ran out" in page.all_text) == (final < expected)


OTHER_CONVERSION = "gs://acme-artifacts/cache/conversions/conv-5f2a/rother000009-a2/"


def cached_story() -> dict[str, Any]:
    """The story, but plan found run rother000009's conversion in the cache: no convert attempt."""
    return story(
        lineage={**story()["lineage"], "converted_uri": OTHER_CONVERSION},
        attempts=[a for a in story()["attempts"] if a["stage"] != "convert"],
    )


def _x_span(svg: ET.Element, element_id: str) -> tuple[float, float]:
    """The left and right x of a bar (its path's vertices), or of a mark (its marker's position)."""
    element = by_id(svg, element_id)
    uses = list(element.iter(f"{SVG}use"))
    if uses:
        return float(uses[0].get("x", "nan")), float(uses[0].get("x", "nan"))
    path = element.find(f"{SVG}path")
    assert path is not None
    found = [float(x) for x in re.findall(r"[ML] ([-\d.]+) ", path.get("d", ""))]
    return min(found), max(found)


def test_a_cache_hit_is_a_row_of_the_timeline_on_its_one_time_axis() -> None:
    """A run that converted nothing (the cached conversion was reused) shows the skipped convert
    stage as a row with a mark, in the timeline and in its table; the mark and every bar are
    placed by one time axis: x is the same linear function of time for every row."""
    data = cached_story()
    html = report.render_report(as_record(data), now=NOW, painter=cli_charts)
    timeline = charts(html)["timeline"]
    assert "convert · cache hit" in texts(timeline)
    assert "skipped: run rother000009's conversion (its convert #2) reused" in texts(timeline)
    assert "cache hit: stage skipped" in texts(timeline)  # the legend
    rows = [r for r in Page(html).tags("tr") if r.get("data-cache-hit") == "true"]
    assert [r["data-stage"] for r in rows] == ["convert"]
    assert (
        "convert - - cache hit - not launched - - - - skipped: run rother000009's conversion (its convert #2) reused; this run converted nothing"
        in Page(html).all_text
    )
    # One axis: fit x = a + b·t through two bars' starts, then every bar's start and end and the
    # cache-hit mark (placed where train #1 launched, the skip being just before it) lie on it.
    spans: dict[str, tuple[datetime, datetime]] = {}
    for a in data["attempts"]:
        spans[f"timeline-attempt-{a['stage']}-{a['attempt']}"] = (
            datetime.fromisoformat(a["launched_at"]),
            datetime.fromisoformat(a["finished_at"]),
        )
    first, last = spans["timeline-attempt-train-1"][0], spans["timeline-attempt-publish-1"][0]
    x_first, x_last = (
        _x_span(timeline, "timeline-attempt-train-1")[0],
        _x_span(timeline, "timeline-attempt-publish-1")[0],
    )
    per_second = (x_last - x_first) / (last - first).total_seconds()
    assert per_second > 0

    def x_of(when: datetime) -> float:
        return x_first + per_second * (when - first).total_seconds()

    for gid, (start, end) in spans.items():
        left, right = _x_span(timeline, gid)
        assert left == pytest.approx(x_of(start), abs=0.05), gid
        if (end - start).total_seconds() > 60:  # a sliver is drawn wider than its seconds
            assert right == pytest.approx(x_of(end), abs=0.05), gid
    mark = _x_span(timeline, "timeline-cache-hit-convert")[0]
    assert mark == pytest.approx(x_of(first), abs=0.05)


def test_a_run_that_converted_shows_no_cache_hit_row(html: str) -> None:
    """The story converted in round 1 (its round 2 reused its own conversion, which the lineage
    says): no skipped convert stage on the timeline or in its table."""
    assert "timeline-cache-hit-convert" not in html
    assert not [r for r in Page(html).tags("tr") if "data-cache-hit" in r]
