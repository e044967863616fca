"""A sweep's page and `rlpipe compare` with a child the sweep's rule stopped early: where it
stopped (the rule's step, the step it trained to, the reason) in the list and the table, a cross
on the reward chart at that step, and the chip-hours used against an estimate without stopping.

Three children of the story's kind (``tests/report/test_compare.py``, evaluations every 25) with
full requests (200 steps); child 0 stopped by ASHA at the rung at step 25 when it was judged
again at step 50, its first train attempt's 30.4 chip-hours kept. Every expected number is worked
out by hand in the test.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import jinja2
import jsonschema
import pytest

from rlpipe.cli import charts as cli_charts
from rlpipe.core.request import validate_request
from rlpipe.core.runs.record import EarlyStopRecord, RunRecord, Source, SweepParent
from rlpipe.report import compare
from tests.cli.test_compare_json import COMPARE_SCHEMA
from tests.conftest import minimal_request
from tests.harness.cli import compare_over
from tests.report.test_compare import GCP, _with
from tests.report.test_report import Page, by_id, charts
from tests.report.test_report_chromium import browser  # noqa: F401  (browser: a fixture)
from tests.report.test_report_story import NOW, story

PARENT = "rstopsweep01"
CHILDREN = ["rstopchild00", "rstopchild01", "rstopchild02"]
RATES = [1e-6, 2e-5, 5e-5]
REASON = (
    "at the rung at step 25 its post_mean_reward, 0.1050, is outside the top 1 of the 3 children there "
    "(1/3; the 1st best is 0.2100; others: child 1 0.2100, child 2 0.1680)"
)


def _request(rate: float) -> dict[str, Any]:
    """A full request as the ledger keeps it: 200 steps (num_batches 200, batch 4, one iteration)."""
    doc = minimal_request(training={"num_batches": 200, "learning_rate": rate})
    return validate_request(doc).model_dump(mode="json")


def children() -> list[RunRecord]:
    base = story()
    records = []
    for index, (run_id, rate) in enumerate(zip(CHILDREN, RATES, strict=True)):
        record = _with(base, run_id, rate, [0.5, 1.0, 0.8][index])
        record["request"] = _request(rate)
        record["lineage"]["sweep"] = {
            "parent": PARENT,
            "index": index,
            "size": 3,
            "point": {"training.learning_rate": rate},
        }
        if index == 0:  # stopped at its evaluation at step 50, during its first train attempt
            record["state"] = "stopped"
            record["failure"] = {
                "tag": "stopped",
                "message": REASON,
                "stage": "train",
                "attempt": 1,
                "rule": "sweep-early-stopped",
            }
            record["attempts"] = [
                a for a in record["attempts"] if (a["stage"], a["attempt"]) in {("convert", 1), ("train", 1)}
            ]
            # as the stage service writes a stopped attempt (control/stage/service.py, _stop_early)
            record["attempts"][-1].update(
                phase="stopped", failure_class="stopped", reason=REASON, failure_rule="sweep-early-stopped"
            )
            results = record["results"]
            results["intermediate"] = [e for e in results["intermediate"] if e["step"] <= 50]
            results["post"], results["final_step"] = None, None
            record["lineage"]["final_step"] = None
        records.append(RunRecord.model_validate(record))
    return records


def parent(early_stop: dict[str, Any] | None = None) -> RunRecord:
    stop = EarlyStopRecord(
        run_id=CHILDREN[0], index=0, rule="asha", metric="post_mean_reward", step=25, value=0.105,
        threshold=0.21, compared={"1": 0.21, "2": 0.168}, reason=REASON, at="2026-12-03T09:00:00.000000Z",
    )  # fmt: skip
    request = {
        **_request(1e-6),
        "sweep": {"grid": {"training.learning_rate": RATES}, "select": {"metric": "post_mean_reward"}},
    }
    if early_stop is not None:
        request["sweep"]["early_stop"] = early_stop
    return RunRecord(
        run_id=PARENT, key="request:stop", source=Source(kind="cli"), request=request, state="training",
        sweep=SweepParent(children=CHILDREN, points=[{"training.learning_rate": r} for r in RATES], max_parallel=3, stopped=[stop]),
    )  # fmt: skip


# By hand: the story's attempts hold 0 + 30.4 + 15.47 + 105.6 + 0 + 0 = 151.47 chip-hours per full
# child; the stopped child kept its convert (0) and first train attempt (30.4).
USED = 30.4 + 2 * 151.47  # 333.34
# Without stopping, at the rate measured on the two children that trained to their end (all of
# their 151.47 chip-hours are train attempts': 2 × 151.47 for 2 × 200 steps, 0.757350 per step):
# the stopped child's 30.4 used, plus its 150 remaining steps (200 − 50) × 0.75735 = 113.6025.
WITHOUT = 30.4 + 113.6025 + 2 * 151.47  # 446.9425
# Its own rate would have given 30.4 × 200 / 50 = 121.6 (424.54 in all): lower here, since the
# finishers' failed attempts are in their rate; start-up dominates the other way in a real sweep.


def page() -> str:
    return compare.render_compare(children(), sweep=parent(), now=NOW, painter=cli_charts)


def stop_shown(html: str) -> list[str]:
    """What the page says of each stopped child, or what is missing: the check every test reads."""
    missing = []
    shown = Page(html)
    marks = [a for a in shown.tags("span") if "data-stopped" in a]
    if [a["data-stopped"] for a in marks] != [CHILDREN[0]]:
        missing.append("the list marks no stopped child")
    if [a["data-stop-step"] for a in shown.tags("div") if "data-stop-step" in a] != ["25"]:
        missing.append("the table gives no stop step")
    if REASON not in shown.all_text:
        missing.append("the reason is not on the page")
    if "stopped early at step 25 by asha (trained to step 50)" not in shown.all_text:
        missing.append("the words of the mark")
    return missing


def test_the_stopped_child_is_marked_in_the_list_and_the_table() -> None:
    assert stop_shown(page()) == []


def test_the_chart_has_a_cross_at_the_step_it_trained_to_on_its_curve_only() -> None:
    svg = charts(page())["compare"]
    cross = by_id(svg, "compare-mean-reward-run1-stopped")
    assert cross is not None
    ids = {e.get("id") for e in svg.iter() if e.get("id")}
    assert not {f"compare-mean-reward-run{i}-stopped" for i in (2, 3)} & ids
    # The legend says once what a cross is; the stopped curve carries no words of its own (a
    # sweep's stopped children end together at the first rungs, where words piled up), and only the
    # runs that reached their end are labelled with their value.
    assert cli_charts.STOP_LEGEND in "".join(svg.itertext())
    assert "compare-mean-reward-run1-label" not in ids
    assert {"compare-mean-reward-run2-label", "compare-mean-reward-run3-label"} <= ids


def _asha_demo_lines() -> list[Any]:
    """The sweep-asha demo's nine points as its page drew them: long names, seven children stopped
    at steps 10 to 50 with values close together, two trained to step 200 ending 0.37 and 0.76, and
    two more that ended at 0.3734 and 0.3790 to make their labels collide."""
    from rlpipe.report.charts import Point
    from rlpipe.report.compare_chart import RunLine

    def curve(values: list[float], step: int = 10) -> list[Point]:
        return [Point(i * step, v, None) for i, v in enumerate(values)]

    stopped = [
        (0.1372, 20),
        (0.1345, 20),
        (0.1322, 10),
        (0.2733, 20),
        (0.2515, 20),
        (0.3691, 50),
        (0.2991, 10),
    ]
    lines = []
    for i, (value, at) in enumerate(stopped):
        name = (
            f"rl.grpo_beta={[0.04, 0.08, 0.16][i % 3]}, learning_rate={['2e-06', '2e-05', '0.0002'][i // 3]}"
        )
        points = curve([0.12, *[value + 0.001 * k for k in range(at // 10)]])
        lines.append(RunLine(f"run{i}", f"{name} (stopped)", points, stopped_at=at))
    lines.append(
        RunLine(
            "run7",
            "rl.grpo_beta=0.16, learning_rate=2e-05 (selected)",
            curve([0.12 + 0.0032 * k for k in range(21)]),
            selected=True,
        )
    )
    lines.append(RunLine("run8", "rl.grpo_beta=0.08, learning_rate=0.0002", curve([0.12, *[0.3734] * 20])))
    lines.append(RunLine("run9", "rl.grpo_beta=0.04, learning_rate=0.0002", curve([0.12, *[0.3790] * 20])))
    return lines


def test_on_a_crowded_sweep_chart_the_legend_fits_and_no_two_labels_overlap() -> None:
    """The sweep-asha demo's page clipped its legend on both sides (``arning_rate=1e-05``,
    ``rl.grpo_b``) and piled its value and "stopped" labels up at steps 10 to 20: measured here on
    the figure as matplotlib lays it out, the legend inside the figure with every name whole, and
    the words on the axes apart."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    lines = _asha_demo_lines()
    fig = cli_charts.compare_figure(lines)
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    [legend] = fig.legends
    box, page = legend.get_window_extent(renderer), fig.bbox
    assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0, (box, page)
    assert [t.get_text() for t in legend.get_texts()] == [
        *(line.label for line in lines),
        cli_charts.STOP_LEGEND,
    ]
    [ax] = fig.axes
    words = [t for t in ax.texts if t.get_text()]
    assert sorted(t.get_text() for t in words) == ["0.1840", "0.3734", "0.3790"]  # the three that ended
    boxes = [t.get_window_extent(renderer) for t in words]
    for i, one in enumerate(boxes):
        for other in boxes[i + 1 :]:
            assert not one.overlaps(other), [t.get_text() for t in words]


def test_chip_hours_against_a_sweep_without_stopping_are_an_estimate_said_how() -> None:
    shown = Page(page())
    [box] = [a for a in shown.tags("div") if a.get("id") == "stop-savings"]
    assert (box["data-used"], box["data-without"]) == (f"{USED:.2f}", f"{WITHOUT:.2f}")  # 333.34, 446.94
    assert "(used 75% of it)" in shown.all_text  # 333.34 / 446.9425 = 0.746
    # The page shows how: the finishers' measured rate, and what it is applied to.
    how = " ".join(shown.all_text.lower().split())
    assert (
        "measured: the 2 children that trained to the end used 302.94 train chip-hours for 400 steps" in how
    )
    assert "(0.7573 per step)" in how and "its remaining steps" in how


@pytest.mark.parametrize(
    ("min_step", "best", "below"),
    [
        # ASHA, eta 3, three children of 200 steps (evaluations every 10): the rungs are 50 and 150.
        # Best case: the first eta − 1 = 2 go on to step 200, the third stops at the first rung:
        # 200 + 200 + 50 = 450 of 600 steps = 75 %. The share used, 333.34 / 446.9425 = 74.6 %,
        # is below it, and the page says why (the finishers' rate holds their retried attempts).
        (50, "0.7500", True),
        # The first rung at 10 (rungs 10, 30, 90): 200 + 200 + 10 = 410 of 600 = 68.3 %; 74.6 % is
        # above it: no "below" on the page.
        (10, "0.6833", False),
    ],
)
def test_the_share_used_is_set_against_the_plans_best_case_and_below_it_the_page_says_why(
    min_step: int, best: str, below: bool
) -> None:
    html = compare.render_compare(
        children(), sweep=parent({"rule": "asha", "min_step": min_step}), now=NOW, painter=cli_charts
    )
    shown = Page(html)
    [note] = [a for a in shown.tags("div") if a.get("id") == "plan-best"]
    assert note["data-best"] == best
    text = " ".join(shown.all_text.split())
    assert f"): {float(best):.0%} of the training steps without stopping;" in text
    assert (
        "The share used is below it : the stopped children's remaining steps are estimated" in text
    ) is below


def test_a_page_without_a_stopped_child_has_no_mark_and_no_estimate() -> None:
    records = children()[1:]
    html = compare.render_compare(records, now=NOW, painter=cli_charts)
    assert "stop-savings" not in html and "data-stopped" not in html


def test_compare_json_gives_the_stop_and_the_estimate(capsys: pytest.CaptureFixture[str]) -> None:
    """Without the parent (plain compare): the rule's step is the child's last evaluation, the reason its failure's."""
    assert compare_over(children(), [*CHILDREN, "--json"], GCP) == 0
    out = json.loads(capsys.readouterr().out)
    jsonschema.validate(out, COMPARE_SCHEMA)
    assert out["runs"][0]["stopped"] == {"rule": None, "step": 50, "trained_to": 50, "reason": REASON}
    assert [r["stopped"] for r in out["runs"][1:]] == [None, None]
    assert out["early_stop"]["chip_hours_used"] == round(USED, 2)
    assert out["early_stop"]["chip_hours_without_estimate"] == round(WITHOUT, 2)
    assert out["early_stop"]["not_estimated"] == []


def test_mutation_a_template_without_the_marks_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check bites: a copy of the real template with the table's stop mark taken out."""
    source = Path(compare.__file__).parent
    for name in ("compare_template.html.j2", "stack_notice.html.j2"):
        shutil.copy(source / name, tmp_path / name)
    copy = tmp_path / "compare_template.html.j2"
    text = copy.read_text()
    mark = '<div class="stopped" data-stop-step="{{ r.stop.step }}">{{ stop_words(r.stop) }}</div>'
    assert mark in text
    copy.write_text(text.replace(mark, ""))
    import rlpipe.report as report

    monkeypatch.setattr(
        report,
        "_environment",
        lambda: jinja2.Environment(
            loader=jinja2.FileSystemLoader(tmp_path),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        ),
    )
    assert stop_shown(page()) == ["the table gives no stop step"]


def test_in_chromium_the_stop_is_seen_in_the_text_and_the_cross_is_drawn(
    browser: Any, tmp_path: Path
) -> None:
    """What a reader sees: the mark and the estimate in the rendered text, the cross drawn with a size."""
    out = tmp_path / "sweep.html"
    out.write_text(page(), encoding="utf-8")
    browser.send("Page.enable")
    assert "errorText" not in browser.send("Page.navigate", url=out.as_uri())
    browser.wait_for("Page.loadEventFired")
    seen = browser.evaluate(
        """(() => {
          const cross = document.getElementById("compare-mean-reward-run1-stopped");
          const r = cross ? cross.getBoundingClientRect() : null;
          return {text: document.body.innerText, cross: r ? [r.width, r.height] : null};
        })()"""
    )
    assert "stopped early at step 25 by asha (trained to step 50)" in seen["text"]
    assert "without early stopping about 446.94" in seen["text"]
    assert seen["cross"] is not None and min(seen["cross"]) > 4, seen["cross"]


def test_with_no_child_trained_to_its_end_the_page_says_it_used_the_stopped_childs_own_rate() -> None:
    """Where no child trained to its end there is no measured rate: the stopped child's own is
    used, and the page says it is on the high side."""
    from rlpipe.report.stopping import savings, stop_marks

    records = children()
    unfinished = [records[0], *(r.model_copy(update={"state": "training"}) for r in records[1:])]
    saved = savings(unfinished, stop_marks(unfinished, parent()), NOW)
    assert saved is not None and saved.without is not None
    # 30.4 × 200 / 50 = 121.6 for the stopped child; the others as used (2 × 151.47).
    assert round(saved.without, 2) == round(121.6 + 2 * 151.47, 2)
    assert "its own measured rate, as no child trained to its end" in saved.how


def test_the_measured_rate_counts_steps_as_the_stopped_childs_remaining_steps_are_counted() -> None:
    """With rl.num_iterations 2, train_rl's final step (400, the finishers' lineage.final_step) is
    twice the outer step the evaluations count in (200): the rate is per outer step, or the
    estimate would come out half as large for the remaining steps."""
    from rlpipe.report.stopping import savings, stop_marks

    records = []
    for record in children():
        doc = record.model_dump(mode="json")
        doc["request"] = validate_request(
            minimal_request(
                training={"num_batches": 200, "learning_rate": doc["request"]["training"]["learning_rate"]},
                maxtext_overrides={"rl.num_iterations": 2},
            )
        ).model_dump(mode="json")
        if record.lineage.final_step:
            doc["lineage"]["final_step"] = 400  # train_rl's steps: 200 outer steps × 2 iterations
        records.append(RunRecord.model_validate(doc))
    saved = savings(records, stop_marks(records, parent()), NOW)
    # By hand: 302.94 chip-hours over 2 × 200 outer steps (0.75735 each); 150 remaining → 113.6025.
    assert saved is not None and saved.without is not None
    assert round(saved.without, 2) == round(30.4 + 113.6025 + 2 * 151.47, 2)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        # Child 2 still training: it counts what it has used so far, so the share is low for now.
        ({"state": "training"}, "1 child has not ended and counts only what it has used so far"),
        # Child 2 failed before its final step (no final step in its lineage): it counts as used.
        (
            {"state": "failed", "final_step": None},
            "1 child ended before its final step without being stopped (failed or cancelled) and "
            "counts as what it used",
        ),
        # Child 2 failed after training to its final step (at export, say): not a reason, and the
        # finishers' rate is (child 1 alone now, so the share is still below 75 %).
        ({"state": "failed"}, "the stopped children's remaining steps are estimated at the finishers'"),
    ],
)
def test_below_the_plans_best_case_the_reason_is_the_one_that_holds(change: dict[str, Any], why: str) -> None:
    from rlpipe.report.stopping import savings, stop_marks

    records = children()
    doc = records[2].model_dump(mode="json")
    doc["state"] = change["state"]
    if "final_step" in change:
        doc["lineage"]["final_step"] = change["final_step"]
    records[2] = RunRecord.model_validate(doc)
    sweep = parent({"rule": "asha", "min_step": 50})
    saved = savings(records, stop_marks(records, sweep), NOW, sweep)
    assert saved is not None and saved.plan_best == 0.75
    assert saved.below_plan_why is not None and saved.below_plan_why.startswith(why), saved.below_plan_why


def test_a_bound_over_some_of_the_children_is_not_given() -> None:
    """Two of three children in the ledger: the plan's bound over two says nobody can be stopped
    (1.0), which is not the sweep's; none is given."""
    from rlpipe.report.stopping import savings, stop_marks

    records = children()[:2]
    sweep = parent({"rule": "asha", "min_step": 50})
    saved = savings(records, stop_marks(records, sweep), NOW, sweep)
    assert saved is not None and saved.plan_best is None
