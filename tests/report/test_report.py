"""`rlpipe report`: one self-contained HTML page per run, read back by parsing it.

The page is parsed as HTML (``html.parser``) and each inline chart as SVG (it is XML), so the
checks look at elements and attributes, not at substrings that a stylesheet or a comment could
also contain. Chart series are found by the ids their ``gid`` gives them (``timeline-…``,
``reward-…``); the numbers behind them are in the chart's text and in the data tables beside it.
"""

from __future__ import annotations

import argparse
import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rlpipe import report
from rlpipe.cli import charts as cli_charts
from rlpipe.cli import report_command
from rlpipe.core.runs.record import LEDGER_TIME, Attempt, Lineage, RunRecord, Source

T0 = datetime(2026, 5, 1, 8, 0, tzinfo=UTC)
NOW = T0 + timedelta(hours=9)
SVG = "{http://www.w3.org/2000/svg}"
STEPS = [50, 100, 150, 200, 250, 300]
OPERATOR_SA = "rlpipe-operator@my-project.iam.gserviceaccount.com"


def ts(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).strftime(LEDGER_TIME)


def attempt(stage: str, n: int, start: float, end: float | None, phase: str, **extra: Any) -> dict[str, Any]:
    return {
        "stage": stage,
        "attempt": n,
        "workload": f"rtest-{stage}-a{n}",
        "uid": None,
        "launched_at": ts(start),
        "finished_at": ts(end) if end is not None else None,
        "phase": phase,
        "failure_class": None,
        "reason": None,
        "resume_step": None,
        "chip_hours": None,
        **extra,
    }


# Every outcome and every failure class once: convert 1 (capacity) and 2, train 1 (preempted),
# train 2 (resources), 3 (transient), 4 (permanent), 5 (superseded: cancelled), 6 (succeeded),
# export 1 (succeeded), publish 1 (still running).
ATTEMPTS = [
    attempt("convert", 1, 0, 30, "failed", failure_class="capacity", reason="no quota", chip_hours=0.0),
    attempt("convert", 2, 31, 70, "succeeded", chip_hours=0.0),
    attempt(
        "train", 1, 71, 150, "failed", failure_class="preempted", reason="node reclaimed", chip_hours=42.25
    ),
    attempt("train", 2, 152, 160, "failed", failure_class="resources", reason="OOMKilled", chip_hours=4.0),
    attempt("train", 3, 161, 170, "failed", failure_class="transient", reason="api 503", chip_hours=4.5),
    attempt("train", 4, 171, 180, "failed", failure_class="permanent", reason="exit 1", chip_hours=5.0),
    attempt("train", 5, 181, 182, "superseded", chip_hours=None),
    attempt("train", 6, 183, 400, "succeeded", resume_step=150, chip_hours=115.75),
    attempt("export", 1, 401, 430, "succeeded", chip_hours=0.0),
    attempt("publish", 1, 431, None, "running"),
]


def record(**overrides: Any) -> RunRecord:
    return RunRecord.model_validate(ledger_json(**overrides))


def ledger_json(**overrides: Any) -> dict[str, Any]:
    """The run's ``run.json`` as the ledger stores it."""
    base: dict[str, Any] = {
        "run_id": "rtest0000001",
        "key": "request:test",
        "source": {"kind": "cli"},
        "request": {
            "model": "gemma4-26b",
            "hf_repo": "google/gemma-4-26b-a4b-it",
            "image": "us-docker.pkg.dev/p/r/maxtext:0.2.4",
            "labels": {"team": "rl"},
            "gate": {"min_post_mean_reward": 0.5, "min_reward_gain": None},
        },
        "state": "gated",
        "stage": "publish",
        "attempt": 1,
        "attempts": ATTEMPTS,
        "lineage": {
            "hf_repo": "google/gemma-4-26b-a4b-it",
            "hf_revision": "main",
            "hf_sha": "0123456789abcdef0123456789abcdef01234567",
            "image": "us-docker.pkg.dev/p/r/maxtext:0.2.4",
            "conversion_key": "conv-5f2a",
            "conversion_cache_hit": False,
            "checkpoint_uri": "gs://artifacts/runs/rtest0000001/",
            "export_uri": "gs://artifacts/runs/rtest0000001/export/",
            "final_step": 300,
        },
        "results": {
            "pre": _eval(0.1234, 12.5),
            "post": _eval(0.8765, 71.25),
            "intermediate": [
                {"step": s, "mean_reward": 0.2 + s / 1000, "accuracy": 20.0 + s / 10} for s in STEPS
            ],
            "final_step": 300,
        },
        "gate": {
            "passed": False,
            "reasons": ["post mean_reward 0.41 below 0.5", "accuracy fell by 3.2 points"],
            "evaluated_at": ts(401),
            "override": {
                "by": "alice@example.com",
                "at": ts(420),
                "reason": "known eval flake",
                "caller": OPERATOR_SA,
            },
        },
        "created_at": ts(0),
        "updated_at": ts(431),
    }
    return {**base, **overrides}


def _eval(mean_reward: float, accuracy: float) -> dict[str, Any]:
    return {
        "corr": accuracy,
        "total": 100,
        "accuracy": accuracy,
        "partial_accuracy": accuracy + 1,
        "format_accuracy": 99.0,
        "mean_reward": mean_reward,
    }


class Page(HTMLParser):
    """Every element (tag, attributes) and the text of the page, outside and inside the charts."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []
        self.styles: list[str] = []
        self._in_style = False
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {k: v or "" for k, v in attrs}))
        self._in_style = tag == "style"

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        (self.styles if self._in_style else self.text).append(data)

    def tags(self, name: str) -> list[dict[str, str]]:
        return [attrs for tag, attrs in self.elements if tag == name]

    @property
    def all_text(self) -> str:
        return " ".join(" ".join(self.text).split())


def charts(html: str) -> dict[str, ET.Element]:
    """The inline SVG charts, parsed, by their name (the prefix of their ids)."""
    found = {}
    for text in re.findall(r"<svg\b.*?</svg>", html, flags=re.S):
        svg = ET.fromstring(text)
        ids = [e.get("id", "") for e in svg.iter() if e.get("id")]
        found[ids[0].split("-", 1)[0]] = svg
    return found


def by_id(svg: ET.Element, element_id: str) -> ET.Element:
    found = [e for e in svg.iter() if e.get("id") == element_id]
    assert len(found) == 1, f"{element_id}: {len(found)} elements"
    return found[0]


def texts(svg: ET.Element) -> list[str]:
    return ["".join(t.itertext()) for t in svg.iter(f"{SVG}text")]


@pytest.fixture(scope="module")
def html() -> str:
    return report.render_report(record(), now=NOW, painter=cli_charts)


def test_the_page_has_both_charts_drawing_the_runs_numbers(html: str) -> None:
    page = Page(html)
    assert len(page.tags("svg")) == 2
    found = charts(html)
    assert set(found) == {"timeline", "reward"}
    reward = found["reward"]
    # The intermediate curve is one path through every evaluation (path simplification is off);
    # this ledger did not record which attempt printed them, so they are one unlabelled series.
    path = by_id(reward, "reward-mean-reward-unlabelled").find(f"{SVG}path")
    assert path is not None
    assert len(re.findall(r"[ML] ", path.get("d", ""))) == len(STEPS)
    accuracy = by_id(reward, "reward-accuracy-unlabelled").find(f"{SVG}path")
    assert accuracy is not None and len(re.findall(r"[ML] ", accuracy.get("d", ""))) == len(STEPS)
    # Pre and post are their own series, labelled with their values in the chart.
    for gid in ("reward-pre", "reward-post", "reward-pre-accuracy", "reward-post-accuracy"):
        by_id(reward, gid)
    assert "pre 0.1234" in texts(reward)
    assert "post 0.8765" in texts(reward)
    assert "post 71.25%" in texts(reward)
    assert "accuracy (%)" in texts(reward)
    # The data table beside the chart holds every point, pre at step 0 and post at the final step.
    points = [
        (r.get("data-point", "intermediate"), int(r["data-step"]))
        for r in page.tags("tr")
        if "data-step" in r
    ]
    assert points == [("pre", 0), *(("intermediate", s) for s in STEPS), ("post", 300)]
    assert "0.8765" in page.all_text and "+0.7531" in page.all_text


def test_without_a_painter_the_page_draws_nothing_and_keeps_every_number(html: str) -> None:
    """The control plane's copy (control/lifecycle/run_report.py) is rendered without a painter,
    because matplotlib is not in the function bundle: each chart is a note that names the command
    that draws it, and the tables hold the same rows as the page the CLI draws."""
    bare = report.render_report(record(), now=NOW, painter=None)
    page = Page(bare)
    assert page.tags("svg") == [] and "matplotlib" not in bare
    for note in ("timeline-no-chart", "reward-no-chart"):
        assert [e for e in page.tags("p") if e.get("id") == note], f"{note}: no note where the chart was"
    assert f"charts are drawn by rlpipe report {record().run_id}" in page.all_text
    tables = re.findall(r"<table\b.*?</table>", bare, flags=re.S)
    assert len(tables) >= 3 and tables == re.findall(r"<table\b.*?</table>", html, flags=re.S)


def test_every_attempt_is_on_the_timeline_with_its_outcome_and_failure_class(html: str) -> None:
    timeline = charts(html)["timeline"]
    rows = {
        (r["data-stage"], int(r["data-attempt"])): r for r in Page(html).tags("tr") if "data-attempt" in r
    }
    assert set(rows) == {(a["stage"], a["attempt"]) for a in ATTEMPTS}
    for a in ATTEMPTS:
        by_id(timeline, f"timeline-attempt-{a['stage']}-{a['attempt']}")
    outcome = {key: (r["data-outcome"], r["data-failure-class"]) for key, r in rows.items()}
    assert outcome[("convert", 1)] == ("failed", "capacity")
    assert outcome[("train", 1)] == ("failed", "preempted")
    assert outcome[("train", 2)] == ("failed", "resources")
    assert outcome[("train", 3)] == ("failed", "transient")
    assert outcome[("train", 4)] == ("failed", "permanent")
    assert outcome[("train", 5)] == ("cancelled", "")
    assert outcome[("train", 6)] == ("succeeded", "")
    assert outcome[("publish", 1)] == ("running", "")
    # The legend names each colour that is used.
    legend = texts(timeline)
    for label in ("succeeded", "running", "cancelled", "failed: preempted", "failed: capacity"):
        assert label in legend
    for label in ("failed: resources", "failed: transient", "failed: permanent"):
        assert label in legend


def test_colours_follow_outcome_then_failure_class(html: str) -> None:
    timeline = charts(html)["timeline"]

    def fill(gid: str) -> str:
        path = by_id(timeline, f"timeline-{gid}").find(f"{SVG}path")
        assert path is not None
        found = re.search(r"fill: ([^;]+)", path.get("style", ""))
        assert found is not None
        return found.group(1)

    assert fill("attempt-train-1") == report.COLOURS["preempted"]
    assert fill("attempt-convert-1") == report.COLOURS["capacity"]
    assert fill("attempt-train-6") == report.COLOURS["succeeded"]
    assert fill("attempt-train-5") == report.COLOURS["cancelled"]
    assert fill("attempt-publish-1").startswith("url(#timeline-")  # running: hatched
    assert len({fill(f"attempt-train-{n}") for n in range(1, 7)}) == 6


def test_running_attempts_reach_now_and_attempts_of_an_ended_run_are_closed() -> None:
    rows = {(r.stage, r.attempt): r for r in report.attempt_rows(record(), NOW)}
    assert rows[("publish", 1)].outcome == "running" and rows[("publish", 1)].end == NOW
    assert rows[("publish", 1)].finished_at == "now (running)"
    ended = {(r.stage, r.attempt): r for r in report.attempt_rows(record(state="cancelled"), NOW)}
    assert ended[("publish", 1)].outcome == "cancelled"
    assert ended[("publish", 1)].end == T0 + timedelta(minutes=431)  # the record's last update
    assert [(r.stage, r.attempt) for r in ended.values()] == [(a["stage"], a["attempt"]) for a in ATTEMPTS]


def test_gate_reasons_override_lineage_and_chip_hours(html: str) -> None:
    page = Page(html)
    text = page.all_text
    assert "post mean_reward 0.41 below 0.5" in text and "accuracy fell by 3.2 points" in text
    # the name the person gave, and the identity Google verified on the promote call
    assert (
        f"overridden by alice@example.com (verified caller {OPERATOR_SA}) at 2026-05-01 15:00:00 UTC: "
        "known eval flake" in text
    )
    assert "min_post_mean_reward" in text
    for value in (
        "0123456789abcdef0123456789abcdef01234567",
        "conv-5f2a",
        "gs://artifacts/runs/rtest0000001/export/",
    ):
        assert value in text
    hours = report.chip_hours(report.attempt_rows(record(), NOW))
    assert {s.stage: s.hours for s in hours["stages"]} == {
        "convert": 0.0,
        "train": 171.5,
        "export": 0.0,
        "publish": 0.0,
    }
    # Train #5 recorded none; publish #1 recorded none either, but a publish Job holds no chip.
    assert hours["unknown"] == 1 and hours["cpu"] == ["publish"]
    # This request does not say its placement: conversion's 0.0 is shown as read, not as "no TPU".
    assert [s.text for s in hours["stages"]] == ["0.00", "171.50", "0.00", "no TPU"]
    total = [a for tag, a in page.elements if tag == "tr" and a.get("id") == "chip-hours-total"]
    assert total and "total 171.50" in text


def test_the_page_loads_nothing_from_the_network(html: str) -> None:
    page = Page(html)
    loading = {"script", "link", "img", "iframe", "object", "embed", "audio", "video", "source", "image"}
    assert not [tag for tag, _ in page.elements if tag in loading]
    for tag, attrs in page.elements:
        for name, value in attrs.items():
            if name.startswith("xmlns"):
                continue  # namespace names, never fetched
            assert "://" not in value, (tag, name, value)
            if name in ("href", "src", "xlink:href", "srcset", "action", "data", "poster"):
                assert value.startswith("#"), (tag, name, value)
            for ref in re.findall(r"url\(([^)]*)\)", value):
                assert ref.startswith("#"), (tag, name, value)
    css = "\n".join(page.styles)
    assert "@import" not in css and "@font-face" not in css and "url(" not in css
    assert "<!DOCTYPE svg" not in html and "<?xml" not in html


def test_ids_are_unique_across_both_charts(html: str) -> None:
    ids = [a["id"] for _, a in Page(html).elements if "id" in a]
    assert len(ids) == len(set(ids))


def test_user_data_is_escaped() -> None:
    hostile = "<script>alert(1)</script>"
    img = '"><img src=x onerror=alert(2)>'
    html = report.render_report(
        record(
            run_id="r<b>",
            request={"model": hostile, "labels": {"team": hostile, img: "x"}},
            attempts=[attempt("train", 1, 0, 10, "failed", failure_class="permanent", reason=img)],
            failure={"tag": "permanent", "message": hostile, "stage": "train", "attempt": 1},
            gate={
                "passed": False,
                "reasons": [hostile],
                "evaluated_at": ts(5),
                "override": {"by": img, "at": ts(6), "reason": hostile},
            },
        ),
        now=NOW,
        painter=cli_charts,
    )
    page = Page(html)
    assert not page.tags("script") and not page.tags("img") and not page.tags("b")
    assert hostile in page.all_text and "team=" + hostile in page.all_text
    assert "overridden by " + img in page.all_text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


@pytest.mark.parametrize(
    "results",
    [None, {"pre": None, "post": None, "intermediate": [], "final_step": None}, {"intermediate": [{}]}],
    ids=["absent", "empty", "junk"],
)
def test_a_run_without_evaluations_says_so(results: dict[str, Any] | None) -> None:
    data = ledger_json(results=results, gate=None)
    if results is None:
        del data["results"]
    html = report.render_report(RunRecord.model_validate(data), now=NOW, painter=cli_charts)
    page = Page(html)
    assert report.NO_EVALUATION in page.all_text
    assert len(page.tags("svg")) == 1  # the timeline only
    assert "no gate evaluated" in page.all_text


def test_a_new_run_renders_without_attempts_or_results() -> None:
    record_model = RunRecord(run_id="rnew00000001", key="k", source=Source(kind="cli"), request={})
    html = report.render_report(record_model, now=NOW, painter=cli_charts)
    page = Page(html)
    assert not page.tags("svg")
    assert "no attempt launched yet" in page.all_text and report.NO_EVALUATION in page.all_text


def test_a_record_of_todays_ledger_model_renders() -> None:
    """The RunRecord as it is (with or without results, gate and chip_hours) renders."""
    rec = RunRecord(
        run_id="rmodel000001",
        key="k",
        source=Source(kind="cli"),
        request={"model": "gemma4-26b"},
        state="training",
        stage="train",
        attempt=1,
        attempts=[
            Attempt(
                stage="convert",
                attempt=1,
                workload="w-c",
                launched_at=ts(0),
                finished_at=ts(9),
                phase="succeeded",
            ),
            Attempt(stage="train", attempt=1, workload="w-t", launched_at=ts(10), phase="running"),
        ],
        lineage=Lineage(hf_repo="google/x", hf_sha="a" * 40),
    )
    html = report.render_report(rec, now=NOW, painter=cli_charts)
    timeline = charts(html)["timeline"]
    by_id(timeline, "timeline-attempt-train-1")
    assert "google/x" in Page(html).all_text


def test_pre_sits_at_step_zero_and_post_at_the_final_step() -> None:
    curve = report.reward_curve(record())
    assert curve is not None and curve.pre is not None and curve.post is not None
    assert (curve.pre.step, curve.post.step) == (0, 300)
    # Without results.final_step, post goes after the last intermediate evaluation, not before it.
    results = {**record().results, "final_step": None}
    curve = report.reward_curve(record(results=results, lineage={"final_step": 999}))
    assert curve is not None and curve.post is not None and curve.post.step == 300
    # nan/inf become null in the ledger; such a point is skipped, not drawn at 0.
    results = {
        "intermediate": [{"step": 5, "mean_reward": None, "accuracy": None}],
        "post": None,
        "pre": None,
    }
    assert report.reward_curve(record(results=results)) is None


def test_write_report_and_the_subcommand(tmp_path: Path) -> None:
    path = report.write_report(record(), tmp_path / "out" / "run.html", now=NOW, painter=cli_charts)
    assert path.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")

    class FakeLedger:
        def get(self, run_id: str) -> Any:
            if run_id != "rtest0000001":
                return None
            return RunRecord(run_id=run_id, key="k", source=Source(kind="cli"), request={})

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    gcp = SimpleNamespace(local=False, kubeconfig="", project="p", artifacts_bucket="b")
    report_command.register(sub, settings=lambda: gcp, ledger=lambda settings: FakeLedger())
    out = tmp_path / "r.html"
    args = parser.parse_args(["report", "rtest0000001", "-o", str(out)])
    assert args.func(args) == 0 and "rtest0000001" in out.read_text(encoding="utf-8")
    args = parser.parse_args(["report", "rmissing", "-o", str(tmp_path / "none.html")])
    assert args.func(args) == 1 and not (tmp_path / "none.html").exists()


def test_the_reports_heavy_imports_wait_until_a_page_is_rendered() -> None:
    """matplotlib and Jinja2 are imported when a page is rendered, not when the CLI parser is built
    or a function starts."""
    import subprocess
    import sys

    code = "import sys, rlpipe.report; print(any(m in sys.modules for m in ('matplotlib', 'jinja2')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_long_curve_keeps_every_point() -> None:
    """matplotlib simplifies paths of 128+ vertices by default; the report turns that off."""
    steps = list(range(1, 401))
    results = {"intermediate": [{"step": s, "mean_reward": s / 400, "accuracy": 50.0} for s in steps]}
    reward = charts(report.render_report(record(results=results), now=NOW, painter=cli_charts))["reward"]
    path = by_id(reward, "reward-mean-reward-unlabelled").find(f"{SVG}path")
    assert path is not None and len(re.findall(r"[ML] ", path.get("d", ""))) == len(steps)
    assert not list(
        by_id(reward, "reward-mean-reward-unlabelled").iter(f"{SVG}use")
    )  # no markers at this density


@pytest.mark.parametrize(("team", "shown"), [("vision", "vision"), (None, "default")])
def test_the_page_names_the_runs_team(team: str | None, shown: str) -> None:
    record_model = RunRecord(run_id="rteam0000001", key="k", source=Source(kind="gcs", team=team), request={})
    html = report.render_report(record_model, now=NOW, painter=cli_charts)
    assert re.search(rf'<dt>team</dt><dd id="fact-team">{shown}</dd>', html), "the team fact"


def test_a_waiting_run_says_what_it_waits_for_in_the_words_status_uses() -> None:
    """The report, rlpipe status and list share one vocabulary for a wait (core.runs.admission)."""
    waiting = {
        "waits_for": "team-place",
        "reason": "team vision has 4 of 4 active runs",
        "since": "2026-12-01T10:00:00Z",
    }
    html = report.render_report(
        record(state="accepted", stage=None, admission=waiting), now=NOW, painter=cli_charts
    )
    fact = re.search(r'<dd id="fact-waiting">(.*?)</dd>', html)
    assert fact is not None, "a waiting run's page says why"
    assert fact.group(1) == (
        "for a place under its team&#39;s limits since 2026-12-01T10:00:00Z: team vision has 4 of 4 active runs"
    )
    assert 'id="fact-waiting"' not in report.render_report(
        record(), now=NOW, painter=cli_charts
    )  # a run not waiting
