"""`rlpipe report SWEEP`: a sweep's parent is reported as the comparison of its children, with the
child the sweep selected marked and the selection's reason, read back by parsing the page and in
headless Chromium (the browser fixture of ``tests/report/test_report_chromium.py``: it skips where
Debian's chromium is missing, and fails under CI=true).

The children are the story's records (``tests/report/test_report_story.py``, via ``tests/report/test_compare.py``)
at three learning rates, each a sweep member; the selection is the sweep's own rule applied to
them (``core.sweep.select``), so its reason is the sentence the control plane writes.
"""

from __future__ import annotations

import argparse
import contextlib
import io
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rlpipe.cli import report_command
from rlpipe.control.sweep.coordination import selection_record
from rlpipe.core import sweep as core_sweep
from rlpipe.core.request.sweep import SelectRule
from rlpipe.core.runs.record import RunRecord, Source, SweepParent
from tests.report.test_compare import _with
from tests.report.test_report import Page
from tests.report.test_report_chromium import MEASURE, browser  # noqa: F401  (browser: a fixture)
from tests.report.test_report_story import shown, story

PARENT = "rsweep000001"
CHILDREN = ["rchildlr0000", "rchildlr0001", "rchildlr0002"]
RATES = [1e-6, 2e-5, 5e-5]
SCALES = [0.5, 1.0, 0.8]  # post mean_reward × scale: the middle child (index 1) scores highest
WINNER = CHILDREN[1]
# Each child's point as `rlpipe status PARENT` shows it (its overrides): what the page names.
POINTS = ["learning_rate=1e-06", "learning_rate=2e-05", "learning_rate=5e-05"]


def _children() -> list[RunRecord]:
    base = story()
    records = []
    for index, (run_id, rate, scale) in enumerate(zip(CHILDREN, RATES, SCALES, strict=True)):
        record = _with(base, run_id, rate, scale)
        record["lineage"]["sweep"] = {
            "parent": PARENT,
            "index": index,
            "size": len(CHILDREN),
            "point": {"training.learning_rate": rate},
        }
        records.append(RunRecord.model_validate(record))
    return records


def _parent(
    children: list[RunRecord], *, selected: bool = True, state: str | None = None, cancelled: bool = False
) -> RunRecord:
    points = [{"training.learning_rate": rate} for rate in RATES]
    selection = None
    if selected:
        rule = SelectRule(metric="post_mean_reward")
        chosen = core_sweep.select(
            rule,
            [
                core_sweep.Candidate(c.run_id, i, points[i], c.state, True, c.results)
                for i, c in enumerate(children)
            ],
        )
        selection = selection_record(chosen, rule, at="2026-12-03T10:00:00.000000Z")
    request = {
        **story()["request"],
        "sweep": {"grid": {"training.learning_rate": RATES}, "select": {"metric": "post_mean_reward"}},
    }
    return RunRecord(
        run_id=PARENT,
        key="request:sweep-lr",
        source=Source(kind="cli"),
        request=request,
        state=state or ("succeeded" if selected else "training"),
        sweep=SweepParent(
            children=CHILDREN, points=points, max_parallel=2, selection=selection, cancelled=cancelled
        ),
    )


def _report(records: list[RunRecord], out: Path) -> tuple[int, str]:
    """``rlpipe report PARENT -o OUT`` on a ledger of ``records``; its exit code and stdout."""
    by_id = {r.run_id: r for r in records}
    ledger = SimpleNamespace(get=by_id.get)
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    report_command.register(
        sub,
        settings=lambda: SimpleNamespace(local=False, kubeconfig="", prices_json=""),
        ledger=lambda s: ledger,
    )
    args = parser.parse_args(["report", PARENT, "-o", str(out)])
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = args.func(args)
    return code, printed.getvalue()


@pytest.fixture(scope="module")
def sweep_page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, RunRecord]:
    children = _children()
    parent = _parent(children)
    out = tmp_path_factory.mktemp("sweep-report") / "sweep.html"
    code, printed = _report([parent, *children], out)
    assert code == 0, printed
    return out, printed, parent


def test_the_parents_report_compares_its_children_with_the_winner_marked(
    sweep_page: tuple[Path, str, RunRecord],
) -> None:
    out, printed, parent = sweep_page
    assert parent.sweep is not None and parent.sweep.selection is not None
    reason = parent.sweep.selection.reason
    assert reason.startswith("child 1 (learning_rate=2e-05) has the highest post_mean_reward, 0.6421")
    html = out.read_text(encoding="utf-8")
    page = Page(html)
    # Every child, in point order; the parent itself runs nothing and is not one of the runs.
    assert [a["data-run"] for a in page.tags("li") if "data-run" in a] == CHILDREN
    assert [a["data-run"] for a in page.tags("li") if a.get("class") == "selected-run"] == [WINNER]
    assert sum(1 for a in page.tags("span") if a.get("id") == "selected-mark") == 1
    assert f"Selected: {WINNER}: {reason}" in shown(html)
    # The sweep's point is the request field the children differ in.
    assert "training.learning_rate 1e-06 2e-05 5e-05" in page.all_text
    assert [a["data-point"] for a in page.tags("li") if "data-run" in a] == POINTS
    assert printed.splitlines() == [
        f"wrote {out} (sweep {PARENT}: 3 children compared)",
        f"  selected {WINNER}: {reason}",
    ]


def test_before_the_selection_no_child_is_marked_and_a_missing_child_is_left_out(tmp_path: Path) -> None:
    children = _children()
    parent = _parent(children, selected=False)
    out = tmp_path / "sweep.html"
    code, printed = _report([parent, children[0], children[2]], out)  # child 1 not claimed yet
    assert code == 0
    page = Page(out.read_text(encoding="utf-8"))
    assert [a["data-run"] for a in page.tags("li") if "data-run" in a] == [CHILDREN[0], CHILDREN[2]]
    assert not [a for a in page.tags("li") if a.get("class") == "selected-run"]
    assert not [a for a in page.tags("div") if a.get("id") == "selection"]
    assert (
        printed.splitlines()[1]
        == "  no child is selected yet: the rule is applied once every child has ended"
    )


def test_a_sweep_with_one_child_in_the_ledger_gets_its_run_page_and_none_is_not_found(tmp_path: Path) -> None:
    children = _children()
    parent = _parent(children, selected=False)
    code, printed = _report([parent, children[2]], tmp_path / "one.html")
    assert code == 0 and "its run page" in printed
    assert f"rlpipe run {CHILDREN[2]}" in (tmp_path / "one.html").read_text(encoding="utf-8")
    code, printed = _report([parent], tmp_path / "none.html")
    assert code == 3 and not (tmp_path / "none.html").exists()


def test_the_sweep_report_in_chromium_shows_the_winner_marked(
    browser: Any,
    sweep_page: tuple[Path, str, RunRecord],
) -> None:
    """The parent's page in the browser: it loads with no error and fetches nothing, the chart is
    drawn, and what a reader sees marks the winner (the badge, the row's colour, the reason)."""
    out, _, parent = sweep_page
    assert parent.sweep is not None and parent.sweep.selection is not None
    for domain in ("Page", "Runtime", "Log", "Network"):
        browser.send(f"{domain}.enable")
    browser.send(
        "Emulation.setDeviceMetricsOverride", deviceScaleFactor=1, mobile=False, width=1280, height=900
    )
    navigated = browser.send("Page.navigate", url=out.as_uri())
    assert "errorText" not in navigated, navigated
    browser.wait_for("Page.loadEventFired")
    measured = browser.evaluate(MEASURE)
    assert measured["ready"] == "complete"
    assert not browser.seen("Runtime.exceptionThrown")
    assert not [e["entry"] for e in browser.seen("Log.entryAdded") if e["entry"].get("level") == "error"]
    assert {e["request"]["url"] for e in browser.seen("Network.requestWillBeSent")} == {out.as_uri()}
    [chart] = measured["charts"]
    assert chart["name"] == "compare" and chart["shapes"] > 10, chart
    marked = browser.evaluate(
        """(() => {
          const rows = [...document.querySelectorAll("#runs li")];
          const badge = document.getElementById("selected-mark");
          const box = badge.getBoundingClientRect();
          return {
            selected: rows.filter(r => r.classList.contains("selected-run")).map(r => r.dataset.run),
            badgeIn: badge.closest("li").dataset.run,
            badgeText: badge.innerText,
            badgeShown: box.width > 0 && box.height > 0 && getComputedStyle(badge).visibility === "visible",
            backgrounds: rows.map(r => getComputedStyle(r).backgroundColor),
            reason: document.getElementById("selection").innerText,
          };
        })()"""
    )
    assert marked["selected"] == [WINNER] and marked["badgeIn"] == WINNER
    assert marked["badgeText"] == "selected" and marked["badgeShown"]
    # The winner's row is tinted (#e8f5e9); the others are not.
    assert marked["backgrounds"] == ["rgba(0, 0, 0, 0)", "rgb(232, 245, 233)", "rgba(0, 0, 0, 0)"]
    assert " ".join(marked["reason"].split()) == f"Selected: {WINNER}: {parent.sweep.selection.reason}"
    text = " ".join(measured["text"].split())
    for run_id in CHILDREN:
        assert run_id in text
    header = " ".join(measured["header"]["text"].split())
    assert f"Sweep {PARENT}" in header and measured["header"]["bottom"] <= measured["header"]["viewport"]


def _legend(html: str) -> list[str]:
    """The texts of the comparison chart (its legend entries and post-value labels)."""
    from tests.report.test_report import charts, texts

    return texts(charts(html)["compare"])


def test_the_sweeps_page_names_the_sweep_and_its_points_and_the_legend_names_points(
    sweep_page: tuple[Path, str, RunRecord],
) -> None:
    out, _, _ = sweep_page
    html = out.read_text(encoding="utf-8")
    page = Page(html)
    assert [a for a in page.tags("span") if a.get("id") == "sweep"]
    assert f"Sweep {PARENT} succeeded 3 points;" in page.all_text
    assert f"rlpipe sweep {PARENT}: succeeded" in html  # the title
    # Each child is listed with its point; the data section names the point beside the run id.
    for run_id, point in zip(CHILDREN, POINTS, strict=True):
        assert f"{point}: {run_id} (succeeded, gemma4-26b)" in shown(html)
        assert f"{run_id} ({point})" in shown(html[html.index('<section id="data">') :])
    # The chart's legend reads as the sweep's points, not as run ids.
    legend = _legend(html)
    assert [t for t in legend if t.startswith("learning_rate=")] == [
        POINTS[0],
        f"{POINTS[1]} (selected)",
        POINTS[2],
    ]
    assert not [t for t in legend if any(run_id in t for run_id in CHILDREN)]


def _children_cancelled(children: list[RunRecord]) -> list[RunRecord]:
    """The children as `rlpipe cancel PARENT` leaves them: each cancelled, its publish (for the
    winner, launched) cancelled too; nothing published."""
    ended = []
    for child in children:
        data = child.model_dump(mode="json")
        data["state"] = "cancelled"
        data["attempts"] = [
            {**a, "phase": "cancelled"} if a["stage"] == "publish" else a for a in data["attempts"]
        ]
        if child.run_id != WINNER:
            data["attempts"] = [a for a in data["attempts"] if a["stage"] != "publish"]
        ended.append(RunRecord.model_validate(data))
    return ended


def test_a_cancelled_sweep_shows_no_selected_badge_but_that_nothing_was_published(tmp_path: Path) -> None:
    """Cancelled while its winner was publishing: the rule had selected a child, but nothing was
    published. No green badge, no tinted row, no "Selected:" box; a banner says why."""
    children = _children_cancelled(_children())
    parent = _parent(children, state="cancelled", cancelled=True)
    out = tmp_path / "cancelled.html"
    code, printed = _report([parent, *children], out)
    assert code == 0
    html = out.read_text(encoding="utf-8")
    page = Page(html)
    assert not [
        a for a in page.tags("span") if a.get("id") == "selected-mark" or "badge" in a.get("class", "")
    ]
    assert not [a for a in page.tags("li") if a.get("class") == "selected-run"]
    assert not [a for a in page.tags("div") if a.get("id") == "selection"]
    assert not [a for a in page.tags("tbody") if "selected-run" in a.get("class", "")]
    banner = [a for a in page.tags("div") if a.get("id") == "not-published"]
    assert len(banner) == 1
    why = f"the sweep was cancelled after its rule selected {WINNER} ({POINTS[1]})"
    assert f"Nothing was published: {why}." in shown(html)
    assert [t for t in _legend(html) if t.startswith("learning_rate=")] == POINTS  # no "(selected)"
    assert printed.splitlines()[1] == f"  nothing was published: {why}"


def test_a_sweep_cancelled_before_its_selection_says_only_that(tmp_path: Path) -> None:
    children = _children_cancelled(_children())
    parent = _parent(children, selected=False, state="cancelled", cancelled=True)
    out = tmp_path / "early.html"
    code, printed = _report([parent, *children], out)
    assert code == 0
    assert "Nothing was published: the sweep was cancelled." in shown(out.read_text(encoding="utf-8"))
    assert printed.splitlines()[1] == "  nothing was published: the sweep was cancelled"
