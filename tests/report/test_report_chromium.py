"""The report in a real browser: Debian's headless Chromium loads the page a person would open.

The other report tests parse the HTML and SVG; only a browser says that the page loads without an
error, that each chart is actually painted (not merely present in the markup) and that the run's
key facts are text a reader sees. Chromium is driven over the DevTools protocol (its websocket, with
``websocket-client``): a page of our own, from a file, on a closed network.

Chromium is Debian's package (``make browser`` installs it; ``make test`` depends on that). Where it
is missing the test skips and says so, except under ``CI=true``, where a missing browser fails.
"""

from __future__ import annotations

import base64
import io
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from rlpipe import report
from rlpipe.cli import charts as cli_charts
from tests.harness.patience import ceiling, wait_until
from tests.report.test_report_story import (
    BRANCH,
    CALLER,
    COMMIT,
    DATA_SHA,
    NOW,
    REASON,
    REPO,
    REWARD_SHA,
    RUN,
    as_record,
    receipt,
    story,
)

CHROMIUM = Path("/usr/bin/chromium")
# Headless, and quiet on the network: without the background-networking flags Chromium's own
# connections (updates, sync, field trials) are refused by a closed network many at a time.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-port=0",  # any free port; Chromium writes it to DevToolsActivePort
)
VIEWPORT = {"width": 1280, "height": 900}
# What a chart's painted pixels must hold: a bar of each colour the story's timeline uses, and
# the reward chart's post marker. Bars and markers are solid fills, so the exact colour is painted.
PAINTED = {
    "timeline": {
        "succeeded": (0x2E, 0x7D, 0x32),
        "preempted": (0xFB, 0x8C, 0x00),
        "permanent": (0xC6, 0x28, 0x28),
    },
    "reward": {"post": (0xC6, 0x28, 0x28), "pre": (0x42, 0x42, 0x42)},
}


def _unavailable(reason: str) -> None:
    """Skip, naming what is missing and how to get it; under CI a missing browser is a failure."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: the browser test must run)")
    pytest.skip(reason)


@dataclass
class DevTools:
    """A small DevTools protocol client over one websocket: commands in order, events kept.

    Only what this test needs: send a command and wait for its answer (events that arrive first are
    kept), and wait for an event. Commands go to a page through its flat session id."""

    ws: Any
    session: str | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    _next: int = 0

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params}
        if self.session is not None:
            message["sessionId"] = self.session
        self.ws.send(json.dumps(message))
        while True:
            answer = json.loads(self.ws.recv())
            if answer.get("id") != self._next:
                self.events.append(answer)
                continue
            if "error" in answer:
                raise AssertionError(f"{method}: {answer['error']}")
            result: dict[str, Any] = answer.get("result") or {}
            return result

    def wait_for(self, method: str) -> dict[str, Any]:
        """The first event ``method`` (kept or still to come); the socket's timeout bounds the wait."""
        while True:
            for event in self.events:
                if event.get("method") == method:
                    return event
            self.events.append(json.loads(self.ws.recv()))

    def seen(self, method: str) -> list[dict[str, Any]]:
        return [e.get("params") or {} for e in self.events if e.get("method") == method]

    def evaluate(self, expression: str) -> Any:
        answer = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in answer:
            raise AssertionError(f"page script failed: {answer['exceptionDetails']}")
        return answer["result"].get("value")


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevTools]:
    """Chromium, headless, with a new empty profile; closed (its whole process group) afterwards."""
    if not os.access(CHROMIUM, os.X_OK):
        _unavailable(f"Debian's chromium is not installed ({CHROMIUM}); `make browser` installs it")
    try:
        import websocket
    except ModuleNotFoundError:
        _unavailable("websocket-client is not installed; it comes with requirements-dev.txt")
    profile = tmp_path_factory.mktemp("chromium-profile")
    log = (profile.parent / "chromium.log").open("wb")
    proc = subprocess.Popen(
        [str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", "about:blank"],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: its renderers and zygotes end with it
    )
    try:
        active = profile / "DevToolsActivePort"

        def endpoint() -> str | None:
            if proc.poll() is not None:
                raise AssertionError(f"chromium exited {proc.returncode}; see {log.name}")
            lines = active.read_text().split() if active.exists() else []
            return f"ws://127.0.0.1:{lines[0]}{lines[1]}" if len(lines) == 2 else None

        url = wait_until(endpoint, 3.0, what="chromium's DevTools endpoint")
        # No Origin header: Chromium refuses websocket clients that send one it was not told to allow.
        ws = websocket.create_connection(url, timeout=ceiling(10.0), suppress_origin=True)
        try:
            tools = DevTools(ws)
            target = tools.send("Target.createTarget", url="about:blank")["targetId"]
            tools.session = tools.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
            yield tools
            tools.session = None
            tools.send("Browser.close")
        finally:
            ws.close()
        proc.wait(timeout=ceiling(3.0))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=ceiling(3.0))
        log.close()


@dataclass(frozen=True)
class Loaded:
    url: str
    text: str  # document.body.innerText: what is rendered as text, closed <details> excluded
    header: dict[str, Any]
    charts: list[dict[str, Any]]
    tools: DevTools


MEASURE = """(() => {
  const box = e => { const r = e.getBoundingClientRect();
    return {x: r.left + scrollX, y: r.top + scrollY, width: r.width, height: r.height}; };
  const header = document.querySelector("header");
  return {
    ready: document.readyState,
    text: document.body.innerText,
    header: {text: header.innerText, bottom: header.getBoundingClientRect().bottom, viewport: innerHeight},
    charts: [...document.querySelectorAll(".chart svg")].map(svg => {
      const shapes = [...svg.querySelectorAll("path, use, rect, line, polyline, polygon")].filter(e => {
        const b = e.getBBox(); const style = getComputedStyle(e);
        return (b.width > 0 || b.height > 0) && style.display !== "none" && style.visibility !== "hidden";
      });
      return {name: (svg.querySelector("[id]") || {id: "?"}).id.split("-")[0], box: box(svg),
              shapes: shapes.length, texts: svg.querySelectorAll("text").length};
    }),
  };
})()"""


@pytest.fixture(scope="module")
def loaded(browser: DevTools, tmp_path_factory: pytest.TempPathFactory) -> Loaded:
    """The story's report, written as ``rlpipe report`` writes it and opened from the file."""
    path = report.write_report(
        as_record(story()),
        tmp_path_factory.mktemp("report") / f"{RUN}-report.html",
        now=NOW,
        receipt=receipt(),
        painter=cli_charts,
    )
    for domain in ("Page", "Runtime", "Log", "Network"):
        browser.send(f"{domain}.enable")
    browser.send("Emulation.setDeviceMetricsOverride", deviceScaleFactor=1, mobile=False, **VIEWPORT)
    url = path.as_uri()
    navigated = browser.send("Page.navigate", url=url)
    assert "errorText" not in navigated, navigated
    browser.wait_for("Page.loadEventFired")
    measured = browser.evaluate(MEASURE)
    assert measured["ready"] == "complete"
    return Loaded(url, measured["text"], measured["header"], measured["charts"], browser)


def test_the_page_loads_without_errors_and_fetches_nothing(loaded: Loaded) -> None:
    tools = loaded.tools
    assert not tools.seen("Runtime.exceptionThrown")
    errors = [e for e in tools.seen("Runtime.consoleAPICalled") if e.get("type") in ("error", "assert")]
    assert not errors
    logged = [e["entry"] for e in tools.seen("Log.entryAdded") if e["entry"].get("level") == "error"]
    assert not logged, logged
    assert not tools.seen("Network.loadingFailed")
    # Self-contained: the only request is the page itself (no font, image, style or script).
    requested = {e["request"]["url"] for e in tools.seen("Network.requestWillBeSent")}
    assert requested == {loaded.url}, requested
    assert loaded.tools.evaluate("document.title") == f"rlpipe run {RUN}: succeeded"


def test_every_chart_is_drawn(loaded: Loaded) -> None:
    """Both charts take room on the page, hold drawn shapes and text, and Chromium painted them:
    a screenshot of each holds the colours of the bars and markers it must show."""
    from PIL import Image

    assert [c["name"] for c in loaded.charts] == ["timeline", "reward"]
    for chart in loaded.charts:
        box = chart["box"]
        assert box["width"] > 300 and box["height"] > 100, chart
        assert chart["shapes"] > 10 and chart["texts"] > 5, chart
        shot = loaded.tools.send(
            "Page.captureScreenshot",
            format="png",
            captureBeyondViewport=True,
            clip={**box, "scale": 1},
        )
        image = Image.open(io.BytesIO(base64.b64decode(shot["data"]))).convert("RGB")
        area = image.width * image.height
        colours = {colour: n for n, colour in image.getcolors(maxcolors=area) or []}
        painted = area - colours.get((255, 255, 255), 0)
        assert painted > 0.03 * area, (chart["name"], painted, area)
        for what, colour in PAINTED[chart["name"]].items():
            assert colours.get(colour, 0) > 20, f"{chart['name']}: no {what} pixels painted"


def test_the_runs_key_facts_are_visible_text(loaded: Loaded) -> None:
    # At the top of the page, without scrolling: what the run is, how it ended, its rounds, its
    # result, and where it was published at which commit.
    header = loaded.header
    assert header["bottom"] <= header["viewport"], header
    for fact in (
        f"Run {RUN}",
        "succeeded",
        "gemma4-26b",
        f"retried once (round 2 by alice: {REASON})",
        "0.6421 (+0.5187 over pre)",
        f"{REPO} branch {BRANCH}, commit {COMMIT}",
    ):
        assert fact in header["text"], fact
    # Further down, as text a reader sees: each round's story, CPU stages without chips, where the
    # conversion came from, and the evaluations labelled by attempt.
    text = " ".join(loaded.text.split())
    for fact in (
        f"retry by alice (verified caller {CALLER})",
        "train #3 resumed from step 100",
        "failed: [permanent] train_rl exited 1: loss is NaN at step 118 in train attempt 2",
        "no TPU",
        "converted by this run: convert #1 in round 1; round 2 reused it (no conversion)",
        "attempt 3 (round 2) resumed from step 100",
        "attempt 1 (round 1)",
        # What it trained on at which commit, and the reward file's hash, in full.
        f"openai/gsm8k@{DATA_SHA}",
        f"reward file sha256 {REWARD_SHA}",
    ):
        assert fact in text, fact
    assert "recorded no chip-hours" not in text


LAYOUT = """(() => {
  const lines = e => { const r = document.createRange(); r.selectNodeContents(e);
    return new Set([...r.getClientRects()].map(q => Math.round(q.top))).size; };
  const notice = document.getElementById("simulated");
  const box = notice.getBoundingClientRect();
  return {
    when: [...document.querySelectorAll("td.when")].map(e => [e.innerText, lines(e)]),
    overflow: document.documentElement.scrollWidth - innerWidth,
    notice: {text: notice.innerText, top: box.top, bottom: box.bottom, height: box.height,
             inHeader: notice.closest("header") !== null},
    viewport: innerHeight,
  };
})()"""


def test_a_local_cached_runs_page_keeps_dates_on_one_line_and_shows_the_skip_and_the_notice(
    browser: DevTools, tmp_path: Path
) -> None:
    """The story as a run on the local stack whose conversion came from the cache: every date in
    the tables is painted on one line (none wraps) without the page overflowing sideways, the
    cache-hit mark is painted on the timeline, and the SIMULATED notice is seen at the top."""
    from PIL import Image

    from rlpipe.report.charts import COLOURS
    from tests.report.test_report_story import cached_story

    path = report.write_report(
        as_record(cached_story()), tmp_path / "cached.html", now=NOW, cluster="double", painter=cli_charts
    )
    browser.events.clear()  # the load event of the page opened before is not this one's
    browser.send("Page.enable")
    browser.send("Emulation.setDeviceMetricsOverride", deviceScaleFactor=1, mobile=False, **VIEWPORT)
    navigated = browser.send("Page.navigate", url=path.as_uri())
    assert "errorText" not in navigated, navigated
    browser.wait_for("Page.loadEventFired")
    layout = browser.evaluate(LAYOUT)
    dates = [(text, n) for text, n in layout["when"] if text[:4].isdigit()]
    assert len(dates) >= 10, layout["when"]  # both rounds' starts, every attempt's launch and finish
    assert all(n == 1 for _, n in dates), [d for d in dates if d[1] != 1]
    assert layout["overflow"] <= 0, layout["overflow"]
    notice = layout["notice"]
    assert notice["inHeader"] and notice["height"] > 0 and notice["bottom"] <= layout["viewport"], notice
    assert notice["text"].startswith("SIMULATED: this run ran on the local stack, cluster double:"), notice
    measured = browser.evaluate(MEASURE)
    timeline = next(c for c in measured["charts"] if c["name"] == "timeline")
    shot = browser.send(
        "Page.captureScreenshot",
        format="png",
        captureBeyondViewport=True,
        clip={**timeline["box"], "scale": 1},
    )
    image = Image.open(io.BytesIO(base64.b64decode(shot["data"]))).convert("RGB")
    colours = {colour: n for n, colour in image.getcolors(maxcolors=image.width * image.height) or []}
    cached = tuple(int(COLOURS["cached"][k : k + 2], 16) for k in (1, 3, 5))
    assert colours.get(cached, 0) > 20, "the cache-hit mark is not painted"
