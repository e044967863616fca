"""Every page of a run on the local stack says, in its header, that the run was simulated and on
which cluster; a page of a run on Google Cloud says nothing of the kind.

The run report, the comparison page and a sweep's page are rendered for each cluster and parsed
(``html.parser``, via ``tests.report.test_report.Page``): the notice must sit inside ``<header>`` and in
the title, so a page shared on its own (or a tab, or a link preview) cannot pass simulated numbers
off as a trained model's. Where the cluster comes from is checked too: the deployment's settings
(``control.lifecycle.run_report.local_cluster``) as the CLI reads them, and the copy the control plane
writes beside the ledger, through the real storage client on fake-gcs-server.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rlpipe import report
from rlpipe.cli import charts as cli_charts
from rlpipe.cli import compare_command, report_command
from rlpipe.control.adapters.logs import Logger
from rlpipe.control.adapters.settings import Settings
from rlpipe.control.lifecycle.run_report import local_cluster, write_run_report
from rlpipe.core import layout
from rlpipe.core.runs.record import RunRecord
from rlpipe.report.compare import render_compare
from tests.cli.test_cli_sweep_report import CHILDREN, PARENT, _children, _parent
from tests.e2e.test_e2e import faults, local  # noqa: F401  (fixtures: the local stack)
from tests.report.test_compare import FAST, records, runs
from tests.report.test_report_story import NOW, RUN, as_record, story

# What each cluster is, in words a reader of the page must find (the brief's two definitions).
CLUSTER_WORDS = {
    "double": ("Kubernetes API double", "cluster simulator", "the TPU", "SIMULATED"),
    "real": ("real Kubernetes control plane", "JobSet", "Kueue", "nodes", "containers", "PLAYED"),
}
# Variables that make Settings.local true (control/adapters/settings.py); cleared for a "GCP" deployment.
LOCAL_ENV = ("RLPIPE_LOCAL", "STORAGE_EMULATOR_HOST", "RLPIPE_KUBE_URL", "RLPIPE_WORKFLOWS_ENDPOINT")


class Header(HTMLParser):
    """The ``<title>`` text, the text inside ``<header>``, and the notice element's attributes."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.title: list[str] = []
        self.header: list[str] = []
        self.notices: list[dict[str, str]] = []
        self.outside: list[str] = []  # text outside the header and title
        self._in: list[str] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {k: v or "" for k, v in attrs}
        if found.get("id") == "simulated":
            found["_in_header"] = "yes" if "header" in self._in else "no"
            self.notices.append(found)
        if tag in ("title", "header", "style", "svg"):
            self._in.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if self._in and self._in[-1] == tag:
            self._in.pop()

    def handle_data(self, data: str) -> None:
        if "title" in self._in:
            self.title.append(data)
        elif "header" in self._in:
            self.header.append(data)
        elif "style" not in self._in and "svg" not in self._in:
            self.outside.append(data)

    @property
    def header_text(self) -> str:
        return " ".join(" ".join(self.header).split())

    @property
    def title_text(self) -> str:
        return " ".join("".join(self.title).split())


def _says_simulated(html: str, cluster: str) -> None:
    page = Header(html)
    assert len(page.notices) == 1, page.notices
    [notice] = page.notices
    assert notice["_in_header"] == "yes" and notice["data-cluster"] == cluster
    text = page.header_text
    assert "SIMULATED" in text and f"cluster {cluster}" in text, text
    for words in CLUSTER_WORDS[cluster]:
        assert words in text, (cluster, words)
    # The other cluster's description is not there: the page names one cluster, the right one.
    other = "real" if cluster == "double" else "double"
    assert CLUSTER_WORDS[other][0] not in text
    assert f"SIMULATED (local stack, cluster {cluster})" in page.title_text


def _says_nothing_of_it(html: str) -> None:
    page = Header(html)
    assert page.notices == []
    shown = " ".join([page.title_text, page.header_text, *page.outside])
    assert not re.search(r"simulat|local stack|played", shown, flags=re.I), shown


@pytest.mark.parametrize("cluster", ["double", "real"])
def test_every_page_of_a_local_run_says_simulated_and_which_cluster(cluster: str) -> None:
    _says_simulated(
        report.render_report(as_record(story()), now=NOW, cluster=cluster, painter=cli_charts), cluster
    )
    _says_simulated(render_compare(records(runs()), now=NOW, cluster=cluster, painter=cli_charts), cluster)
    children = _children()
    sweep = _parent(_children())
    _says_simulated(
        render_compare(children, now=NOW, cluster=cluster, sweep=sweep, painter=cli_charts), cluster
    )


def test_a_page_of_a_run_on_google_cloud_says_nothing_of_the_kind() -> None:
    _says_nothing_of_it(report.render_report(as_record(story()), now=NOW, painter=cli_charts))
    _says_nothing_of_it(render_compare(records(runs()), now=NOW, painter=cli_charts))
    _says_nothing_of_it(render_compare(_children(), now=NOW, sweep=_parent(_children()), painter=cli_charts))


def test_a_page_never_guesses_a_cluster() -> None:
    for wrong in ("", "gke", "Double", "double "):
        with pytest.raises(ValueError, match="cluster must be one of double, real"):
            report.render_report(as_record(story()), now=NOW, cluster=wrong, painter=cli_charts)


def test_the_cluster_comes_from_the_deployments_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """As the CLI and the control plane build them: from the environment (control/adapters/settings.py)."""
    for name in (*LOCAL_ENV, "RLPIPE_KUBECONFIG"):
        monkeypatch.delenv(name, raising=False)
    assert local_cluster(Settings.from_env()) is None  # Google Cloud
    assert local_cluster(Settings(kube_url="http://127.0.0.1:6443")) == "double"
    monkeypatch.setenv("RLPIPE_LOCAL", "1")  # the local stack's functions (local/stack.py)
    monkeypatch.setenv("RLPIPE_KUBE_URL", "http://127.0.0.1:6443")
    assert local_cluster(Settings.from_env()) == "double"
    # The real control plane: reached only by a kubeconfig, the plain URL cleared.
    monkeypatch.setenv("RLPIPE_KUBE_URL", "")
    monkeypatch.setenv("RLPIPE_KUBECONFIG", "/stack/pipeline.kubeconfig")
    assert local_cluster(Settings.from_env()) == "real"


def _ledger(records: list[RunRecord]) -> Any:
    by_id = {r.run_id: r for r in records}
    return SimpleNamespace(get=by_id.get)


def _settings(cluster: str | None) -> Any:
    """What ``local_cluster`` reads, as each deployment's Settings has it."""
    local = cluster is not None
    return SimpleNamespace(local=local, kubeconfig="/k" if cluster == "real" else "", prices_json="")


@pytest.mark.parametrize("cluster", ["double", "real", None])
def test_the_cli_pages_say_where_the_runs_ran(cluster: str | None, tmp_path: Path) -> None:
    """``rlpipe report RUN``, ``rlpipe report SWEEP`` and ``rlpipe compare``: each page from the
    settings of the deployment the CLI talks to."""
    records = [RunRecord.model_validate(r) for r in runs()]
    children = _children()
    ledger = _ledger([*records, _parent(children), *children])
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    report_command.register(sub, settings=lambda: _settings(cluster), ledger=lambda s: ledger)
    compare_command.register(sub, settings=lambda: _settings(cluster), ledger=lambda s: ledger)
    pages = []
    for argv in (["report", RUN], ["report", PARENT], ["compare", RUN, FAST]):
        out = tmp_path / f"{argv[1]}.html"
        args = parser.parse_args([*argv, "-o", str(out)])
        with contextlib.redirect_stdout(io.StringIO()):
            assert args.func(args) == 0, argv
        pages.append(out.read_text(encoding="utf-8"))
    for html in pages:
        if cluster is None:
            _says_nothing_of_it(html)
        else:
            _says_simulated(html, cluster)
    assert all(run_id in pages[1] for run_id in CHILDREN)  # the sweep's page is its children's


def test_the_control_planes_copy_says_simulated_from_its_own_settings(
    buckets: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page kept beside the ledger (what the model card links), written through the real
    storage client: by default from the environment the functions run with, as the stage
    function calls it; or from the settings it is given."""
    state = buckets.store("state")
    record = RunRecord.model_validate(story())
    name = layout.RunLayout(state.bucket_name, RUN).report
    log = Logger("test", stream=io.StringIO())
    # The local stack's functions (local/stack.py): RLPIPE_LOCAL and the emulator; the double.
    monkeypatch.setenv("RLPIPE_LOCAL", "1")
    monkeypatch.delenv("RLPIPE_KUBECONFIG", raising=False)
    assert write_run_report(state, record, log) is not None
    _says_simulated(state.read(name).data.decode("utf-8"), "double")
    # On the real control plane the functions reach the cluster by kubeconfig.
    monkeypatch.setenv("RLPIPE_KUBECONFIG", "/stack/pipeline.kubeconfig")
    assert write_run_report(state, record, log) is not None
    _says_simulated(state.read(name).data.decode("utf-8"), "real")
    # Settings passed in are the ones read (a deployment on Google Cloud says nothing).
    assert write_run_report(state, record, log, settings=_settings(None)) is not None
    _says_nothing_of_it(state.read(name).data.decode("utf-8"))


@pytest.mark.slow
def test_on_the_local_stack_the_pages_say_simulated_and_a_reused_conversion_is_a_row(
    local: Any, faults: Any, tmp_path: Path
) -> None:
    """End to end on the local stack (the double): two runs of one model and image publish; the
    second finds the first's conversion in the cache. The page the stage function keeps beside the
    ledger (what the card links) and the one ``rlpipe report`` writes both say SIMULATED on the
    double, and the second's timeline has the skipped conversion as a row."""
    import os

    from tests.report.test_report import Page

    faults([])
    image = f"us-docker.pkg.dev/cloud-tpu-images/maxtext-images/tpu_post_training:{os.urandom(4).hex()}"
    runs_ = []
    for _ in range(2):
        repo = f"rlpipe-demo/e2e-{os.urandom(4).hex()}"  # an organisation the default allowlist publishes to
        run_id = local.submit(local.request(image=image, publish={"repo": repo}))
        record = local.wait(run_id, expected=30)
        assert record.state == "succeeded", record.failure
        runs_.append(record)
    first, second = runs_
    assert not first.lineage.conversion_cache_hit and second.lineage.conversion_cache_hit
    assert not [a for a in second.attempts if a.stage == "convert"]
    state = local.client.bucket(local.settings.state_bucket)
    for record in runs_:
        kept = state.blob(f"runs/{record.run_id}/report.html").download_as_bytes().decode()
        _says_simulated(kept, "double")
    parser = argparse.ArgumentParser()
    report_command.register(
        parser.add_subparsers(dest="command", required=True),
        settings=lambda: local.settings,
        ledger=lambda s: local.ledger,
    )
    out = tmp_path / "second.html"
    args = parser.parse_args(["report", second.run_id, "-o", str(out)])
    with contextlib.redirect_stdout(io.StringIO()):
        assert args.func(args) == 0
    html = out.read_text(encoding="utf-8")
    _says_simulated(html, "double")
    assert [r["data-stage"] for r in Page(html).tags("tr") if r.get("data-cache-hit") == "true"] == [
        "convert"
    ]
    assert f"skipped: run {first.run_id}'s conversion (its convert #1) reused" in Page(html).all_text
