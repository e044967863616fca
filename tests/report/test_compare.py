"""`rlpipe compare`: one self-contained page comparing runs, read back by parsing it.

Three runs of the story's kind (``tests/report/test_report_story.py``: real ``RunRecord``s with rounds,
evaluations by attempt, pinned data and the request's reward file), trained at three learning
rates; the third scores with MaxText's built-in rewards and runs on a priced TPU. The page is parsed
as HTML (``html.parser``) and its chart as SVG, as ``tests/report/test_report.py`` reads the run report;
``test_compare_in_chromium`` opens it in the browser.
"""

from __future__ import annotations

import argparse
import copy
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rlpipe.cli import charts as cli_charts
from rlpipe.cli import compare_command
from rlpipe.cli.exit_codes import CliError
from rlpipe.core.runs.record import RunRecord, Source
from rlpipe.report import compare
from rlpipe.report.charts import SERIES_COLOURS
from tests.report.test_report import SVG, Page, by_id, charts
from tests.report.test_report_chromium import MEASURE, Loaded, browser  # noqa: F401  (browser: a fixture)
from tests.report.test_report_story import DATA_SHA, NOW, REWARD_SHA, RUN, shown, story

FAST, SLOW = "rfast0000002", "rslow0000003"
TWIN_A, TWIN_B = "rtwina000004", "rtwinb000005"
PRICES = '{"v6e": {"spot": {"price": 1.25, "source": "our contract", "read": "2026-11-30"}}}'
REASON = "highest post mean_reward <b>& cheapest</b>"
# A deployment on Google Cloud, as the CLI's settings describe it (control.lifecycle.run_report.local_cluster).
GCP = SimpleNamespace(local=False, kubeconfig="", prices_json="")


def _with(
    base: dict[str, Any], run_id: str, learning_rate: float, scale: float, **request: Any
) -> dict[str, Any]:
    """The story run renamed, at another learning rate, its rewards scaled by ``scale``."""
    record = copy.deepcopy(base)
    record["run_id"] = run_id
    record["request"] = {**record["request"], "training": {"learning_rate": learning_rate}, **request}
    results = record["results"]
    for name in ("pre", "post"):
        if name == "post":
            results[name]["mean_reward"] = round(results[name]["mean_reward"] * scale, 4)
            results[name]["accuracy"] = round(results[name]["accuracy"] * scale, 2)
    for entry in results["intermediate"]:
        entry["mean_reward"] = round(entry["mean_reward"] * scale, 4)
    return RunRecord.model_validate(record).model_dump(mode="json")


def records(data: list[dict[str, Any]]) -> list[RunRecord]:
    """The runs as the ledger loads them (``Ledger.get``), which is what the pages read."""
    return [RunRecord.model_validate(d) for d in data]


def runs() -> list[dict[str, Any]]:
    base = story()
    first = _with(base, RUN, 2e-5, 1.0)
    fast = _with(base, FAST, 5e-5, 0.8)
    slow = _with(base, SLOW, 1e-6, 0.5, tpu={"type": "v6e-8", "provisioning": "spot"})
    # The slow run scores with MaxText's built-in rewards: no reward file, no copy of one.
    del slow["request"]["rewards"]
    del slow["lineage"]["inputs"]["rewards"]
    return [first, fast, slow]


def identical_runs() -> list[dict[str, Any]]:
    """Four runs, three of them (first, second, fourth) with the same curve at every step: what a
    sweep over a setting that changes nothing (or the simulator's deterministic rewards) gives."""
    base = story()
    return [
        _with(base, RUN, 2e-5, 1.0),
        _with(base, TWIN_A, 3e-5, 1.0),
        _with(base, SLOW, 1e-6, 0.5),
        _with(base, TWIN_B, 4e-5, 1.0),
    ]


@pytest.fixture(scope="module")
def html() -> str:
    return compare.render_compare(
        records(runs()), selected=FAST, reason=REASON, now=NOW, prices_json=PRICES, painter=cli_charts
    )


def test_one_curve_per_run_with_every_evaluation(html: str) -> None:
    chart = charts(html)["compare"]
    lines = sorted(
        e.get("id", "") for e in chart.iter() if re.fullmatch(r"compare-mean-reward-run\d+", e.get("id", ""))
    )
    assert lines == ["compare-mean-reward-run1", "compare-mean-reward-run2", "compare-mean-reward-run3"]
    # pre, the eight steps evaluated (step 75 and 100 twice: the latest attempt's), post: 10 points.
    for gid in lines:
        path = by_id(chart, gid).find(f"{SVG}path")
        assert path is not None and len(re.findall(r"[ML] ", path.get("d", ""))) == 10, gid
    legend = " ".join("".join(t.itertext()) for t in chart.iter(f"{SVG}text"))
    for run in (RUN, SLOW):
        assert run in legend
    assert f"{FAST} (selected)" in legend
    assert "0.6421" in legend and "0.3211" in legend  # each run's post value at its final step


def test_the_pre_post_table(html: str) -> None:
    page = Page(html)
    rows = [(a["data-run"], a["data-metric"]) for a in page.tags("tr") if "data-metric" in a]
    metrics = ["mean_reward", "accuracy", "format_accuracy"]
    assert rows == [(run, m) for run in (RUN, FAST, SLOW) for m in metrics]
    text = page.all_text
    assert f"{RUN} mean_reward 0.1234 0.6421 +0.5187" in text
    assert "accuracy 12.50% 56.25% +43.75 pp" in text
    assert "format accuracy 98.00% 98.00% +0.00 pp" in text
    assert f"{SLOW} mean_reward 0.1234 0.3211 +0.1977" in text  # half the post
    hours = [a["data-chip-hours"] for a in page.tags("td") if "data-chip-hours" in a]
    assert hours == ["151.47"] * 3
    costs = [a["data-cost"] for a in page.tags("td") if "data-cost" in a]
    assert costs == ["unset: no TPU type", "unset: no TPU type", "$189.34 at spot list price"]


def test_only_the_differing_request_fields_are_listed(html: str) -> None:
    page = Page(html)
    keys = [a["data-key"] for a in page.tags("tr") if "data-key" in a]
    # rewards.file.inline is null in two runs and absent in the third: unset in all, not listed.
    assert keys == [
        "rewards.file.path",
        "rewards.file.sha256",
        "rewards.functions",
        "tpu.provisioning",
        "tpu.type",
        "training.learning_rate",
    ]
    # Fields the same in every run are absent, as keys and as rows.
    for same in ("model", "hf_repo", "dataset.repo", "publish.repo", "labels.team", "image"):
        assert same not in keys
        assert f'data-key="{same}"' not in html
    text = page.all_text
    assert "training.learning_rate 2e-05 5e-05 1e-06" in text
    assert 'rewards.functions ["exact_match", "brevity"] ["exact_match", "brevity"] (unset)' in text
    assert "tpu.type (unset) (unset) v6e-8" in text


def test_flatten_and_differences_are_exact() -> None:
    assert compare.flatten({"a": {"b": 1, "c": {"d": [1, 2]}}, "e": {}}) == {
        "a.b": 1,
        "a.c.d": [1, 2],
        "e": {},
    }
    found = compare.config_differences(
        [_requested({"x": 1, "y": {"z": True}}), _requested({"x": 1, "y": {"z": 1}})]
    )
    assert [(d.key, d.values) for d in found] == [("y.z", ["true", "1"])]
    assert compare.config_differences([_requested({"x": 1}), _requested({"x": 1})]) == []


def _requested(request: dict[str, Any]) -> RunRecord:
    return RunRecord(run_id="rrequested01", key="k", source=Source(kind="cli"), request=request)


def test_data_and_rewards_of_each_run(html: str) -> None:
    text = Page(html[html.index('<section id="data">') :]).all_text
    assert text.count(f"openai/gsm8k@{DATA_SHA} split train (7,473 examples)") == 3
    assert text.count(f"openai/gsm8k@{DATA_SHA} split test (1,319 examples)") == 3
    assert text.count("the request's own: exact_match, brevity") == 2
    assert text.count("MaxText's built-in:") == 1
    assert text.count(REWARD_SHA) == 2


def test_the_selected_run_is_marked_with_its_reason(html: str) -> None:
    page = Page(html)
    marked = [a for a in page.tags("li") if a.get("class") == "selected-run"]
    assert [a["data-run"] for a in marked] == [FAST]
    assert len(page.tags("span")) and sum(1 for a in page.tags("span") if a.get("id") == "selected-mark") == 1
    assert f"Selected: {FAST}: {REASON}" in shown(html)
    # The reason is text, escaped: no element of it reaches the page.
    assert "<b>" not in html and "&lt;b&gt;&amp; cheapest&lt;/b&gt;" in html
    # Self-contained: no script, nothing to load.
    assert not page.tags("script") and not page.tags("link") and not page.tags("img")
    unselected = compare.render_compare(records(runs()[:2]), now=NOW, painter=cli_charts)
    assert 'id="selected-mark"' not in unselected and 'id="selection"' not in unselected
    with pytest.raises(ValueError, match="not one of the runs"):
        compare.render_compare(records(runs()[:2]), selected=SLOW, now=NOW, painter=cli_charts)
    with pytest.raises(ValueError, match="at least two"):
        compare.render_compare(records(runs()[:1]), now=NOW, painter=cli_charts)


def test_the_subcommand(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    records = {r["run_id"]: RunRecord.model_validate(r) for r in runs()}

    class FakeLedger:
        def get(self, run_id: str) -> Any:
            return records.get(run_id)

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    compare_command.register(sub, settings=lambda: GCP, ledger=lambda settings: FakeLedger())
    out = tmp_path / "c.html"
    args = parser.parse_args(["compare", RUN, FAST, "-o", str(out), "--select", FAST, "--reason", "best"])
    assert args.func(args) == 0
    page = out.read_text(encoding="utf-8")
    assert f"Selected: {FAST}: best" in shown(page) and SLOW not in page
    args = parser.parse_args(["compare", RUN, "rmissingrunx", "-o", str(tmp_path / "none.html")])
    with pytest.raises(CliError) as missing:
        args.func(args)
    assert missing.value.code == 3 and "no run rmissingrunx" in missing.value.message
    assert not (tmp_path / "none.html").exists()
    for argv in ([RUN], [RUN, RUN], [RUN, FAST, "--select", SLOW], [RUN, FAST, "--reason", "why"]):
        args = parser.parse_args(["compare", *argv, "-o", str(tmp_path / "bad.html")])
        with pytest.raises(CliError) as refused:
            args.func(args)
        assert refused.value.code == 2, argv
    assert not (tmp_path / "bad.html").exists()


def test_compare_in_chromium(browser: Any, tmp_path: Path) -> None:
    """The page in headless Chromium: it loads with no error and fetches nothing, the chart is
    painted (each run's colour on it), and every run id is text a reader sees."""
    import base64
    import io

    from PIL import Image

    path = tmp_path / "compare.html"
    path.write_text(
        compare.render_compare(
            records(runs()), selected=FAST, reason=REASON, now=NOW, prices_json=PRICES, painter=cli_charts
        )
    )
    for domain in ("Page", "Runtime", "Log", "Network"):
        browser.send(f"{domain}.enable")
    browser.send(
        "Emulation.setDeviceMetricsOverride", deviceScaleFactor=1, mobile=False, width=1280, height=900
    )
    navigated = browser.send("Page.navigate", url=path.as_uri())
    assert "errorText" not in navigated, navigated
    browser.wait_for("Page.loadEventFired")
    measured = browser.evaluate(MEASURE)
    loaded = Loaded(path.as_uri(), measured["text"], measured["header"], measured["charts"], browser)
    assert not browser.seen("Runtime.exceptionThrown")
    assert not [e for e in browser.seen("Runtime.consoleAPICalled") if e.get("type") in ("error", "assert")]
    assert not [e["entry"] for e in browser.seen("Log.entryAdded") if e["entry"].get("level") == "error"]
    assert not browser.seen("Network.loadingFailed")
    requested = {e["request"]["url"] for e in browser.seen("Network.requestWillBeSent")}
    assert requested == {loaded.url}, requested
    [chart] = loaded.charts
    assert chart["name"] == "compare"
    box = chart["box"]
    assert box["width"] > 300 and box["height"] > 100, chart
    assert chart["shapes"] > 10 and chart["texts"] > 5, chart
    shot = browser.send(
        "Page.captureScreenshot", format="png", captureBeyondViewport=True, clip={**box, "scale": 1}
    )
    image = Image.open(io.BytesIO(base64.b64decode(shot["data"]))).convert("RGB")
    area = image.width * image.height
    colours = {colour: n for n, colour in image.getcolors(maxcolors=area) or []}
    assert area - colours.get((255, 255, 255), 0) > 0.03 * area
    for i in range(3):  # each run's line and markers, in its own colour
        rgb = tuple(int(SERIES_COLOURS[i][k : k + 2], 16) for k in (1, 3, 5))
        assert colours.get(rgb, 0) > 20, f"run {i + 1}: no pixels of {SERIES_COLOURS[i]}"
    text = " ".join(loaded.text.split())
    for run in (RUN, FAST, SLOW):
        assert run in text, run
    assert f"Selected: {FAST}: {REASON}" in text
    assert "training.learning_rate" in text


def _line_style(chart: ET.Element, gid: str) -> tuple[str, str]:
    """A run's line as drawn: its dash pattern ("solid" without one) and its marker's shape (the
    marker's outline, scaled to unit size, so one shape at two sizes is the same shape)."""
    group = by_id(chart, f"compare-mean-reward-{gid}")
    path = group.find(f"{SVG}path")
    assert path is not None
    dash = re.search(r"stroke-dasharray: ([^;]+)", path.get("style", ""))
    uses = list(group.iter(f"{SVG}use"))
    assert uses, f"{gid}: no markers"
    href = uses[0].get("{http://www.w3.org/1999/xlink}href", "")
    shape = by_id(chart, href.removeprefix("#")).get("d", "")
    numbers = [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?", shape)]
    scale = max(abs(n) for n in numbers) or 1.0
    outline = re.sub(r"-?\d+(?:\.\d+)?", "#", shape), tuple(round(n / scale, 2) for n in numbers)
    return (dash.group(1) if dash else "solid"), repr(outline)


def test_coinciding_curves_each_keep_a_line_style_and_marker_and_are_named() -> None:
    """Four runs, three with one curve: each run is drawn in a dash pattern and a marker shape of
    its own (so none hides the others), and a note names the three whose curves coincide."""
    page_html = compare.render_compare(records(identical_runs()), now=NOW, painter=cli_charts)
    chart = charts(page_html)["compare"]
    styles = [_line_style(chart, f"run{i}") for i in range(1, 5)]
    assert len({dash for dash, _ in styles}) == 4, styles
    assert len({marker for _, marker in styles}) == 4, styles
    page = Page(page_html)
    notes = [a for a in page.tags("p") if "data-coinciding" in a]
    assert [a["data-coinciding"] for a in notes] == ["3"]
    assert [a["data-coincides"] for a in page.tags("span") if "data-coincides" in a] == [RUN, TWIN_A, TWIN_B]
    assert f"The curves of {RUN}, {TWIN_A} and {TWIN_B} coincide" in shown(page_html)
    # Runs whose curves differ get no such note.
    assert "data-coinciding" not in compare.render_compare(records(runs()), now=NOW, painter=cli_charts)


def test_unset_absent_null_and_empty_are_not_differences() -> None:
    """A field absent from one request, null in another and an empty map or list in a third is
    unset in all three: no row. A field set in one run and unset in the others is a difference."""
    base = runs()[:3]
    requests = [
        {**base[0]["request"], "labels": {}, "gate": {"min_post_mean_reward": None}, "notify": None},
        {**{k: v for k, v in base[1]["request"].items() if k != "labels"}, "gate": {}, "env": []},
        {**base[2]["request"], "labels": {"team": "rl"}},
    ]
    for record, request in zip(base, requests, strict=True):
        request.pop("rewards", None)
        record["request"] = request
    found = {d.key: d.values for d in compare.config_differences(records(base))}
    assert found == {
        "labels.team": ["(unset)", "(unset)", "rl"],
        "training.learning_rate": ["2e-05", "5e-05", "1e-06"],
        "tpu.provisioning": ["(unset)", "(unset)", "spot"],
        "tpu.type": ["(unset)", "(unset)", "v6e-8"],
    }
    page = Page(compare.render_compare(records(base), now=NOW, painter=cli_charts))
    assert sorted(a["data-key"] for a in page.tags("tr") if "data-key" in a) == sorted(found)


def test_coinciding_curves_are_all_visible_in_chromium(browser: Any, tmp_path: Path) -> None:
    """Three runs with one curve, painted by the browser: each run's own colour covers pixels of
    the chart, so none of the three is hidden under another (the note is visible text too)."""
    import base64
    import io

    from PIL import Image

    path = tmp_path / "identical.html"
    path.write_text(
        compare.render_compare(records(identical_runs()), now=NOW, painter=cli_charts), encoding="utf-8"
    )
    browser.events.clear()  # the load event of a page opened before is not this one's
    browser.send("Page.enable")
    browser.send(
        "Emulation.setDeviceMetricsOverride", deviceScaleFactor=1, mobile=False, width=1280, height=900
    )
    navigated = browser.send("Page.navigate", url=path.as_uri())
    assert "errorText" not in navigated, navigated
    browser.wait_for("Page.loadEventFired")
    measured = browser.evaluate(MEASURE)
    [chart] = measured["charts"]
    shot = browser.send(
        "Page.captureScreenshot", format="png", captureBeyondViewport=True, clip={**chart["box"], "scale": 1}
    )
    image = Image.open(io.BytesIO(base64.b64decode(shot["data"]))).convert("RGB")
    colours = {colour: n for n, colour in image.getcolors(maxcolors=image.width * image.height) or []}
    painted = []
    for i in range(4):
        rgb = tuple(int(SERIES_COLOURS[i][k : k + 2], 16) for k in (1, 3, 5))
        painted.append(colours.get(rgb, 0))
    assert all(n > 400 for n in painted), painted
    text = " ".join(measured["text"].split())
    assert f"The curves of {RUN}, {TWIN_A} and {TWIN_B} coincide" in text


def test_each_run_says_which_step_its_export_loaded_and_why() -> None:
    data = runs()
    data[1]["lineage"] |= {
        "exported_step": 50,
        "export_reason": "step 50 of 100: the best post_mean_reward (highest)",
    }
    page = Page(compare.render_compare(records(data), now=NOW, prices_json=PRICES, painter=cli_charts))
    cells = [(a["data-exported-step"], a) for a in page.tags("td") if "data-exported-step" in a]
    assert [step for step, _ in cells] == [str(data[0]["lineage"].get("exported_step") or ""), "50", ""]
    assert "step 50: step 50 of 100: the best post_mean_reward (highest)" in page.all_text
    rows = compare.run_rows(records(data), now=NOW)
    assert [r["exported_step"] for r in rows] == [data[0]["lineage"].get("exported_step"), 50, None]
