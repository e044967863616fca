"""Monitoring reads only what the control plane writes; the console links are well formed.

infra/terraform/monitoring.tf selects log lines by ``jsonPayload.event`` and reads their fields
(filters, label and value extractors, the dashboard's logs panel, the alert's condition);
``rlpipe.control.lifecycle.run_metrics`` writes those lines. The static check below parses the Terraform as
tests/repo/test_infra.py does (tfparse, from the tools virtualenv) and fails on any field, event name
or label value the code does not write; a planted mistake shows the check bites.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from rlpipe.cli import console_links
from rlpipe.control.adapters.logs import Logger
from rlpipe.control.lifecycle import run_metrics as rm

ROOT = Path(__file__).resolve().parents[3]
TF_DIR = ROOT / "infra" / "terraform"
MONITORING_TF = TF_DIR / "monitoring.tf"
TEST_TFVARS = """\
project_id           = "test-project"
region               = "us-east5"
gke_cluster_name     = "tpu-cluster"
gke_cluster_location = "us-east5"
"""
_TFPARSE = r"""
import json, sys
import tfparse
print(json.dumps(tfparse.load_from_path(sys.argv[1], vars_paths=[sys.argv[2]]), default=str))
"""
METRIC_TYPE = re.compile(r'metric\.type="logging\.googleapis\.com/user/([^"]+)"')
EVENT_CLAUSE = re.compile(r'jsonPayload\.event\s*=\s*"([^"]*)"')
FIELD = re.compile(r"jsonPayload\.([A-Za-z_][A-Za-z0-9_]*)")
# jsonPayload.<field>="v"  or  jsonPayload.<field>=("v1" OR "v2")
COMPARED = re.compile(r'jsonPayload\.([A-Za-z_]\w*)\s*!?=\s*("[^"]*"|\((?:\s*"[^"]*"\s*(?:OR)?)+\))')


# ------------------------------------------------------------------------------ parsing the Terraform


def _tfparse_python() -> str | None:
    value = os.environ.get("RLPIPE_TFPARSE_PYTHON")
    if value:
        return value
    for candidate in (ROOT / ".tools/bin/python", ROOT / ".tools/tfparse/bin/python"):
        if candidate.exists():
            return str(candidate)
    return None


def parse_terraform(module_dir: Path, tmp_path: Path) -> dict[str, Any]:
    python = _tfparse_python()
    if python is None:
        pytest.skip("tfparse not found: python3 -m venv .tools && .tools/bin/pip install tfparse")
    tfvars = tmp_path / "test.tfvars"
    tfvars.write_text(TEST_TFVARS)
    rel = os.path.relpath(tfvars, module_dir)  # tfparse resolves var files from the module
    proc = subprocess.run(
        [python, "-c", _TFPARSE, str(module_dir), rel],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if proc.returncode != 0:
        if "No module named 'tfparse'" in proc.stderr:
            pytest.skip(f"{python} has no tfparse")
        pytest.fail(f"tfparse failed on {module_dir}:\n{proc.stderr[-3000:]}")
    parsed: dict[str, Any] = json.loads(proc.stdout)
    return parsed


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def _from_monitoring_tf(block: dict[str, Any]) -> bool:
    return bool(block.get("__tfmeta", {}).get("filename", "").endswith("monitoring.tf"))


def _walk(value: Any) -> Iterator[dict[str, Any]]:
    if isinstance(value, dict):
        yield value
        for v in value.values():
            yield from _walk(v)
    elif isinstance(value, list):
        for v in value:
            yield from _walk(v)


def log_readers(tf: dict[str, Any]) -> list[tuple[str, str, list[str]]]:
    """Every place monitoring.tf reads log lines: (where, log filter, extractor expressions)."""
    readers = []
    for metric in tf.get("google_logging_metric") or []:
        if _from_monitoring_tf(metric):
            extractors = list((metric.get("label_extractors") or {}).values())
            if metric.get("value_extractor"):
                extractors.append(metric["value_extractor"])
            readers.append((metric["__tfmeta"]["path"], metric["filter"], extractors))
    for policy in tf.get("google_monitoring_alert_policy") or []:
        if _from_monitoring_tf(policy):
            for i, condition in enumerate(_as_list(policy.get("conditions"))):
                matched = condition.get("condition_matched_log")
                if matched:
                    where = f"{policy['__tfmeta']['path']} condition {i}"
                    readers.append(
                        (where, matched["filter"], list((matched.get("label_extractors") or {}).values()))
                    )
    for dashboard in tf.get("google_monitoring_dashboard") or []:
        if _from_monitoring_tf(dashboard):
            for widget in _walk(json.loads(dashboard["dashboard_json"])):
                if "logsPanel" in widget:
                    readers.append(
                        (
                            f"{dashboard['__tfmeta']['path']} {widget.get('title')!r}",
                            widget["logsPanel"]["filter"],
                            [],
                        )
                    )
    return readers


def monitoring_problems(tf: dict[str, Any]) -> list[str]:
    """What monitoring.tf reads that ``run_metrics`` does not write (empty: all consistent)."""
    problems: list[str] = []
    functions = {f["name"] for f in tf.get("google_cloudfunctions2_function") or []}
    readers = log_readers(tf)
    if not readers:
        return ["monitoring.tf reads no log lines (tfparse found no metric, alert or logs panel)"]
    for where, log_filter, extractors in readers:
        events = EVENT_CLAUSE.findall(log_filter)
        if not events or len(events) != log_filter.count("jsonPayload.event"):
            problems.append(f'{where}: select events as jsonPayload.event="<name>", one clause per event')
        unknown = [e for e in events if e not in rm.EMITTED_FIELDS]
        problems += [f"{where}: no code writes event {e!r}" for e in unknown]
        known = [e for e in events if e in rm.EMITTED_FIELDS]
        readable = set().union(*(rm.payload_fields(e) for e in known)) if known else set()
        for field in sorted(set(FIELD.findall(" ".join([log_filter, *extractors])))):
            if field not in readable:
                problems.append(f"{where}: jsonPayload.{field} is not written by {known or events}")
        for field, literal in COMPARED.findall(log_filter):
            allowed = rm.LABEL_VALUES.get(field)
            for value in re.findall(r'"([^"]*)"', literal):
                if allowed is not None and value not in allowed:
                    problems.append(f"{where}: jsonPayload.{field} is never {value!r} (one of {allowed})")
        if 'resource.type="cloud_run_revision"' not in log_filter:
            problems.append(f'{where}: the functions log as resource.type="cloud_run_revision"')
        selected = re.search(r"service_name=\(([^)]*)\)", log_filter)
        services = set(re.findall(r'"([^"]+)"', selected.group(1) if selected else ""))
        if functions and services != functions:
            problems.append(
                f"{where}: service_name selects {sorted(services)}, the functions are {sorted(functions)}"
            )
    # Label keys: the descriptor's and the extractors' must agree (the API rejects a mismatch).
    metrics = {}
    for metric in tf.get("google_logging_metric") or []:
        if _from_monitoring_tf(metric):
            metrics[metric["name"]] = metric
            labels = metric["metric_descriptor"].get("labels")
            if labels is None and "for_each" in metric:
                # tfparse does not expand a dynamic block nested in another: read its for_each row.
                instance = re.search(r'\["([^"]+)"\]$', metric["__tfmeta"]["path"])
                row = metric["for_each"][instance.group(1)] if instance else {}
                labels = [{"key": k} for k in row.get("labels") or {}]
            declared = {label["key"] for label in _as_list(labels)}
            if declared != set(metric.get("label_extractors") or {}):
                problems.append(f"{metric['name']}: labels {sorted(declared)} without matching extractors")
    # The dashboard charts exactly the metrics defined here.
    charted = set()
    for dashboard in tf.get("google_monitoring_dashboard") or []:
        if _from_monitoring_tf(dashboard):
            for node in _walk(json.loads(dashboard["dashboard_json"])):
                if isinstance(node.get("filter"), str):
                    charted |= set(METRIC_TYPE.findall(node["filter"]))
    if charted != set(metrics):
        problems.append(f"dashboard charts {sorted(charted)}, monitoring.tf defines {sorted(metrics)}")
    return problems


@pytest.fixture(scope="module")
def tf(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return parse_terraform(TF_DIR, tmp_path_factory.mktemp("tfvars"))


def test_monitoring_reads_only_what_the_control_plane_writes(tf: dict[str, Any]) -> None:
    assert monitoring_problems(tf) == []
    paths = {m["__tfmeta"]["path"] for m in tf["google_logging_metric"]}
    assert len(paths) >= 6, paths  # started, ended, gate, stuck, durations, reward


def test_every_event_has_a_reader(tf: dict[str, Any]) -> None:
    read = {e for _, log_filter, _ in log_readers(tf) for e in EVENT_CLAUSE.findall(log_filter)}
    # gate_evaluated carries the gate's reasons for Logs Explorer; its outcome is counted from run_ended.
    assert read == set(rm.EMITTED_FIELDS) - {rm.GATE_EVALUATED}


def test_alert_policy_defaults_to_no_notification_channels(tf: dict[str, Any]) -> None:
    (policy,) = tf["google_monitoring_alert_policy"]
    assert policy["notification_channels"] == []
    assert policy["alert_strategy"]["notification_rate_limit"]["period"], (
        "a log-match condition needs a rate limit"
    )


PLANTED = [
    # (what monitoring.tf says, what the mistake says instead, what the check reports)
    (
        'failure_class = "EXTRACT(jsonPayload.failure_class)"',
        'failure_class = "EXTRACT(jsonPayload.failure_tag)"',
        "jsonPayload.failure_tag is not written",
    ),
    ('event        = "run_stuck"', 'event        = "run_stalled"', "no code writes event 'run_stalled'"),
    (
        'value        = "post_mean_reward"',
        'value        = "duration_seconds"',
        "jsonPayload.duration_seconds is not written",
    ),
    ('(\\"failed\\" OR \\"gated\\")', '(\\"failed\\" OR \\"gate_failed\\")', "never 'gate_failed'"),
    (
        'where        = "NOT jsonPayload.gate=\\"none\\""',
        'where        = "NOT jsonPayload.severity=\\"none\\""',
        "jsonPayload.severity is not written",
    ),
]


@pytest.mark.parametrize(("original", "planted", "reported"), PLANTED, ids=[p[2] for p in PLANTED])
def test_a_planted_mistake_fails_the_check(
    tmp_path: Path, original: str, planted: str, reported: str
) -> None:
    text = MONITORING_TF.read_text()
    assert text.count(original) == 1, f"monitoring.tf changed: update this test's {original!r}"
    copy = tmp_path / "terraform"
    shutil.copytree(TF_DIR, copy, ignore=shutil.ignore_patterns(".terraform", "*.tfstate*", "*.zip"))
    (copy / "monitoring.tf").write_text(text.replace(original, planted))
    problems = monitoring_problems(parse_terraform(copy, tmp_path))
    assert any(reported in p for p in problems), problems


# ------------------------------------------------------------------------------ the lines themselves


CALLS: list[tuple[str, Callable[[Logger], None]]] = [
    (rm.RUN_STARTED, lambda log: rm.run_started(log, run_id="rabc", source_kind="gcs", team="vision")),
    (
        rm.RUN_ENDED,
        lambda log: rm.run_ended(
            log,
            run_id="rabc",
            team="vision",
            outcome="gated",
            failure_class="permanent",
            stage="train",
            post_mean_reward=0.12,
            reward_gain=-0.01,
            gate="failed",
        ),
    ),
    (
        rm.ROUND_ENDED,
        lambda log: rm.run_ended(
            log,
            run_id="rabc",
            team="vision",
            outcome="failed",
            failure_class="preempted",
            budget_exhausted=True,
            stage="train",
            post_mean_reward=None,
            reward_gain=None,
            gate="none",
            round=2,
        ),
    ),
    (
        rm.STAGE_ENDED,
        lambda log: rm.stage_ended(
            log,
            run_id="rabc",
            team="vision",
            stage="train",
            attempt=2,
            phase="failed",
            failure_class="preempted",
            duration_seconds=3600,
            chip_hours=32.5,
        ),
    ),
    (
        rm.GATE_EVALUATED,
        lambda log: rm.gate_evaluated(log, run_id="rabc", passed=None, reasons=["no Post line"]),
    ),
    (rm.RUN_STUCK, lambda log: rm.run_stuck(log, run_id="rabc", stage="convert", reason="queued for 2 h")),
]


def test_every_event_has_a_function() -> None:
    assert {event for event, _ in CALLS} == set(rm.EMITTED_FIELDS) == set(rm.EVENT_FIELDS)


@pytest.mark.parametrize(("event", "call"), CALLS, ids=[c[0] for c in CALLS])
@pytest.mark.parametrize("bound", [False, True], ids=["plain", "bound-logger"])
def test_each_function_writes_exactly_its_declared_fields(
    event: str, call: Callable[[Logger], None], bound: bool
) -> None:
    out = io.StringIO()
    log = Logger("stage", out)
    if bound:  # the caller's context (another run, extra fields) must not leak into the line
        log = log.bind(run_id="rother", stage="export", attempt=9, workload="w", execution="e")
    call(log)
    lines = out.getvalue().splitlines()
    assert len(lines) == 1
    line = json.loads(lines[0])
    assert set(line) == rm.EMITTED_FIELDS[event]
    assert line["event"] == event and line["run_id"] == "rabc" and line["component"] == "stage"
    if rm.TEAM in rm.EVENT_FIELDS[event]:  # runs and chip-hours are charted by team
        assert line[rm.TEAM] == "vision"
    for field, allowed in rm.LABEL_VALUES.items():
        if field in line and line[field] is not None:
            assert line[field] in allowed, (field, line[field])


def test_values_are_what_the_label_extractors_expect() -> None:
    out = io.StringIO()
    log = Logger("stage", out)
    rm.stage_ended(
        log,
        run_id="r",
        team="vision",
        stage="train",
        attempt=1,
        phase="succeeded",
        failure_class=None,
        duration_seconds=12,
        chip_hours=None,
    )
    rm.gate_evaluated(log, run_id="r", passed=True, reasons=("post mean_reward 0.5 meets 0.3",))
    stage, gate = (json.loads(x) for x in out.getvalue().splitlines())
    assert stage["duration_seconds"] == 12.0 and stage["chip_hours"] is None and stage["attempt"] == 1
    assert (gate["passed"], gate["verdict"], gate["reasons"]) == (
        True,
        "passed",
        ["post mean_reward 0.5 meets 0.3"],
    )


@pytest.mark.parametrize(
    "call",
    [
        lambda log: rm.run_ended(
            log,
            run_id="r",
            team="vision",
            outcome="done",
            failure_class=None,
            stage=None,
            post_mean_reward=None,
            reward_gain=None,
            gate="none",
        ),
        lambda log: rm.run_ended(
            log,
            run_id="r",
            team="vision",
            outcome="failed",
            failure_class="oom",
            stage=None,
            post_mean_reward=None,
            reward_gain=None,
            gate="none",
        ),
        lambda log: rm.run_ended(
            log,
            run_id="r",
            team="vision",
            outcome="succeeded",
            failure_class=None,
            stage=None,
            post_mean_reward=None,
            reward_gain=None,
            gate="skipped",
        ),
        lambda log: rm.stage_ended(
            log,
            run_id="r",
            team="vision",
            stage="train",
            attempt=1,
            phase="running",
            failure_class=None,
            duration_seconds=1,
            chip_hours=None,
        ),
        lambda log: rm.stage_ended(
            log,
            run_id="r",
            team="vision",
            stage="train",
            attempt=1,
            phase="failed",
            failure_class=None,
            duration_seconds=-1,
            chip_hours=None,
        ),
        lambda log: rm.run_started(log, run_id="r", source_kind="gcs", team="Vision Team"),
        lambda log: rm.stage_ended(
            log,
            run_id="r",
            team=None,  # type: ignore[arg-type]
            stage="train",
            attempt=1,
            phase="succeeded",
            failure_class=None,
            duration_seconds=1,
            chip_hours=2.0,
        ),
    ],
    ids=["outcome", "failure-class", "gate", "phase", "negative-duration", "team-name", "no-team"],
)
def test_a_value_no_label_expects_is_refused(call: Callable[[Logger], None]) -> None:
    out = io.StringIO()
    with pytest.raises(ValueError):
        call(Logger("stage", out))
    assert out.getvalue() == "", "nothing is written when the line would be wrong"


def test_promoted_fields_are_not_readable_from_the_payload() -> None:
    for event in rm.EMITTED_FIELDS:
        assert {"severity", "time"}.isdisjoint(rm.payload_fields(event))
        assert {"event", "run_id", "message", "component"} <= rm.payload_fields(event)


# ------------------------------------------------------------------------------ console links


def test_workflow_execution_url() -> None:
    name = "projects/my-proj/locations/us-east5/workflows/rlpipe-pipeline/executions/7c1e-9a"
    assert console_links.execution_url(name) == (
        "https://console.cloud.google.com/workflows/workflow/us-east5/rlpipe-pipeline/execution/7c1e-9a"
        "?project=my-proj"
    )
    with pytest.raises(ValueError):
        console_links.parse_execution_name("projects/p/locations/l/workflows/w")


def test_workload_logs_url_encodes_the_query_and_names_the_run_label() -> None:
    url = console_links.workload_logs_url(
        "my-proj", "rq1 x/y", namespace="rlpipe", cluster="tpu-cluster", cluster_location="us-east5"
    )
    prefix = "https://console.cloud.google.com/logs/query;query="
    assert url.startswith(prefix) and url.endswith(";timeRange=P7D?project=my-proj")
    encoded = url[len(prefix) : url.index(";timeRange=")]
    assert re.fullmatch(r"[A-Za-z0-9_.~%-]+", encoded), "every reserved character is percent-encoded"
    query = unquote(encoded)
    assert query == console_links.workload_logs_query(
        "rq1 x/y", namespace="rlpipe", cluster="tpu-cluster", cluster_location="us-east5"
    )
    assert 'resource.type="k8s_container"' in query
    assert 'labels."k8s-pod/rlpipe_dev/run"="rq1 x/y"' in query  # identity.LABEL_RUN, as GKE logs it
    assert 'resource.labels.cluster_name="tpu-cluster"' in query
    assert "%0A" in encoded and "%22" in encoded and "%2F" in encoded and " " not in url


def test_query_values_are_escaped() -> None:
    query = console_links.control_plane_logs_query('r"1\\')
    assert query.endswith('jsonPayload.run_id="r\\"1\\\\"')


def test_artifacts_url() -> None:
    assert console_links.artifacts_url("my-proj", "my-proj-rlpipe-artifacts", "rabc123") == (
        "https://console.cloud.google.com/storage/browser/my-proj-rlpipe-artifacts/runs/rabc123?project=my-proj"
    )
    assert console_links.artifacts_url("p q", "b", "r/1").endswith(
        "/storage/browser/b/runs/r/1?project=p%20q"
    )


def test_run_links_puts_the_project_on_every_link() -> None:
    links = console_links.run_links(
        project="my-proj",
        run_id="rabc",
        artifacts_bucket="bucket",
        namespace="rlpipe",
        execution_name="projects/my-proj/locations/us-east5/workflows/w/executions/e1",
    )
    assert list(links) == ["execution", "workload logs", "control-plane logs", "artifacts"]
    assert all(url.endswith("?project=my-proj") for url in links.values())
    assert "execution" not in console_links.run_links(
        project="p", run_id="r", artifacts_bucket="b", namespace="n", execution_name=None
    )


def test_every_percentile_line_has_a_legend_naming_it_and_its_series(tf: dict[str, Any]) -> None:
    """Two unnamed lines per chart could not be told apart: each says p50 or p95 and its labels."""
    legends = []
    for dashboard in tf.get("google_monitoring_dashboard") or []:
        if _from_monitoring_tf(dashboard):
            for node in _walk(json.loads(dashboard["dashboard_json"])):
                for data_set in node.get("dataSets") or []:
                    if "timeSeriesFilter" not in data_set["timeSeriesQuery"]:
                        continue  # a PromQL line (the chip-hours by team) names its series by its legend
                    reducer = data_set["timeSeriesQuery"]["timeSeriesFilter"]["aggregation"][
                        "crossSeriesReducer"
                    ]
                    if reducer.startswith("REDUCE_PERCENTILE_"):
                        groups = data_set["timeSeriesQuery"]["timeSeriesFilter"]["aggregation"][
                            "groupByFields"
                        ]
                        labels = [re.sub(r'^metric\.label\."(.*)"$', r"\1", g) for g in groups]
                        legends.append((reducer, data_set.get("legendTemplate"), labels))
    assert legends, "the distribution charts have percentile lines"
    for reducer, legend, labels in legends:
        assert legend and legend.split()[0] == f"p{reducer.rsplit('_', 1)[1]}", (reducer, legend)
        assert labels and all(f"${{metric.labels.{label}}}" in legend for label in labels), (legend, labels)


def _ended(record: Any, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    from rlpipe.control.lifecycle import quality_gate

    quality_gate.log_run_ended(Logger("stage"), record)
    [line] = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
    return line


def test_a_run_ends_once_in_the_runs_count_and_later_ends_are_rounds(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A promoted run ended `gated` and then `succeeded`: counted twice before. The first end is
    `run_ended`; the end after the promotion (or after a retry) is `round_ended`."""
    from rlpipe.core.runs.record import GateOverride, GateRecord, RunRecord, Source

    record = RunRecord(run_id="rgated", key="k", source=Source(kind="cli"), request={}, state="gated")
    record.gate = GateRecord(passed=False, reasons=["post mean_reward 0.4 below 0.5"])
    assert _ended(record, capsys)["event"] == rm.RUN_ENDED
    override = GateOverride(by="alice", at="2026-12-04T00:00:00Z", reason="reviewed")
    record.gate.override, record.lineage.promoted, record.state = override, override, "succeeded"
    line = _ended(record, capsys)
    assert (line["event"], line["outcome"], line["gate"], line["round"]) == (
        rm.ROUND_ENDED,
        "succeeded",
        "overridden",
        1,
    )
    retried = RunRecord(
        run_id="rretried", key="k", source=Source(kind="cli"), request={}, state="succeeded", round=2
    )
    assert _ended(retried, capsys)["event"] == rm.ROUND_ENDED


def test_a_run_failed_by_an_exhausted_budget_has_its_last_failures_class(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Lost capacity is not a bug: a run whose preemption budget ran out was logged `permanent`."""
    from rlpipe.core.failures import FailureClass
    from rlpipe.core.request import validate_request
    from rlpipe.core.runs import budgets
    from rlpipe.core.runs.record import Attempt, Failure, RunRecord, Source
    from tests.conftest import minimal_request

    req = validate_request(minimal_request(retry={"budgets": {"preempted": 1}}))
    record = RunRecord(run_id="rbudget", key="k", source=Source(kind="cli"), request={}, state="failed")
    record.attempts = [
        Attempt(stage="train", attempt=n, workload=f"w{n}", launched_at="2026-12-04T00:00:00Z")
        for n in (1, 2)
    ]
    record.attempts[0].failure_class = "preempted"
    failure = budgets.classify(record, req, "train", 2, FailureClass.PREEMPTED, "node reclaimed")
    assert (failure["tag"], failure["exhausted"]) == ("permanent", "preempted")
    record.attempts[1].failure_class, record.attempts[1].budget_exhausted = (
        failure["tag"],
        failure["exhausted"],
    )
    record.failure = Failure(tag="permanent", message=failure["message"], stage="train", attempt=2)
    line = _ended(record, capsys)
    assert (line["failure_class"], line["budget_exhausted"]) == ("preempted", True)
    record.attempts[1].budget_exhausted = None  # a real bug: permanent, and no budget involved
    line = _ended(record, capsys)
    assert (line["failure_class"], line["budget_exhausted"]) == ("permanent", False)


# ------------------------------------------------------------------------------ by team


# The metrics a team's runs and chip-hours are read from: each extracts the lines' team.
TEAM_METRICS = ("runs_started", "runs_ended", "rounds_ended", "stage_chip_hours")
PROMQL_METRIC = re.compile(r"logging_googleapis_com:user_(\w+?)_(sum|count|bucket)\b")


def team_problems(tf: dict[str, Any]) -> list[str]:
    """What keeps the dashboard from breaking runs and chip-hours down by team (empty: nothing)."""
    problems = []
    metrics = {
        m["name"].rsplit("/", 1)[-1]: m
        for m in tf.get("google_logging_metric") or []
        if _from_monitoring_tf(m)
    }
    for key in TEAM_METRICS:
        extractor = (metrics.get(key, {}).get("label_extractors") or {}).get(rm.TEAM)
        if extractor != f"EXTRACT(jsonPayload.{rm.TEAM})":
            problems.append(f"{key} is not broken down by team (label_extractors.team is {extractor!r})")
    promql_names = {re.sub(r"[^A-Za-z0-9_]", "_", m["name"]): key for key, m in metrics.items()}
    runs_by_team = chip_hours_by_team = False
    for dashboard in tf.get("google_monitoring_dashboard") or []:
        if not _from_monitoring_tf(dashboard):
            continue
        for node in _walk(json.loads(dashboard["dashboard_json"])):
            for data_set in node.get("dataSets") or []:
                query = data_set["timeSeriesQuery"]
                promql = query.get("prometheusQuery")
                if promql is not None:
                    read = PROMQL_METRIC.findall(promql)
                    unknown = [name for name, _ in read if name not in promql_names]
                    problems += [
                        f"{node.get('title')!r}: PromQL reads {n}, no metric of monitoring.tf"
                        for n in unknown
                    ]
                    grouped = re.search(r"sum by \(([^)]*)\)", promql)
                    sums_hours = ("stage_chip_hours", "sum") in {(promql_names.get(n), s) for n, s in read}
                    if sums_hours and grouped and rm.TEAM in [g.strip() for g in grouped.group(1).split(",")]:
                        chip_hours_by_team = True
                    continue
                series = query["timeSeriesFilter"]
                groups = series["aggregation"].get("groupByFields") or []
                for name in METRIC_TYPE.findall(series["filter"]):
                    have = set(metrics.get(name.rsplit("/", 1)[-1], {}).get("label_extractors") or {})
                    for label in [re.sub(r'^metric\.label\."(.*)"$', r"\1", g) for g in groups]:
                        if label not in have:
                            problems.append(
                                f"{node.get('title')!r} groups by {label}, a label {name} does not have"
                            )
                if '/runs_ended"' in series["filter"] and f'metric.label."{rm.TEAM}"' in groups:
                    runs_by_team = True
    if not runs_by_team:
        problems.append("no chart groups ended runs by team")
    if not chip_hours_by_team:
        problems.append("no chart sums TPU chip-hours by team")
    return problems


def test_the_dashboard_breaks_runs_and_chip_hours_down_by_team(tf: dict[str, Any]) -> None:
    assert team_problems(tf) == []


TEAM_PLANTED = [
    (
        'groupByFields      = ["metric.label.\\"team\\"", "metric.label.\\"outcome\\""]',
        'groupByFields      = ["metric.label.\\"teams\\"", "metric.label.\\"outcome\\""]',
        "groups by teams, a label rlpipe/runs_ended does not have",
    ),
    (
        'ran out."\n        team             = "The run\'s team (core/teams.py; default on a deployment without teams)."\n      }\n      value  = ""\n      unit   = "1"\n      bounds = []\n    }\n    rounds_ended',
        'ran out."\n      }\n      value  = ""\n      unit   = "1"\n      bounds = []\n    }\n    rounds_ended',
        "runs_ended is not broken down by team",
    ),
    ("sum by (team)", "sum by (stage)", "no chart sums TPU chip-hours by team"),
    (
        '"/[^A-Za-z0-9_]/", "_")}_sum"',
        '"/[^A-Za-z0-9_]/", "_")}_count"',
        "no chart sums TPU chip-hours by team",
    ),
    ("user_${replace(", "user_x_${replace(", "PromQL reads x_rlpipe_stage_chip_hours"),
    (
        '        team  = "The run\'s team (core/teams.py; default on a deployment without teams)."\n      }',
        "      }",
        "stage_chip_hours is not broken down by team",
    ),
]


@pytest.mark.parametrize(("original", "planted", "reported"), TEAM_PLANTED, ids=[p[2] for p in TEAM_PLANTED])
def test_a_dashboard_that_loses_the_team_is_reported(
    tmp_path: Path, original: str, planted: str, reported: str
) -> None:
    text = MONITORING_TF.read_text()
    assert text.count(original) == 1, f"monitoring.tf changed: update this test's {original!r}"
    copy = tmp_path / "terraform"
    shutil.copytree(TF_DIR, copy, ignore=shutil.ignore_patterns(".terraform", "*.tfstate*", "*.zip"))
    (copy / "monitoring.tf").write_text(text.replace(original, planted))
    problems = team_problems(parse_terraform(copy, tmp_path))
    assert any(reported in p for p in problems), problems
