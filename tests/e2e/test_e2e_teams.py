"""Teams on the local stack (``rlpipe local up --teams examples/teams/teams.yaml``), end to end:
each team's folder and its own topic reach intake, which makes each request its team's run, and
the run's workloads are in its team's namespace, where the Secrets its allowlists name are (the
publish step reads the team's write token there and publishes to the team's organisation)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlpipe.cli import submit as submit_cli
from rlpipe.core.runs.record import RunRecord
from rlpipe.local.stack import LocalStack, StackConfig
from rlpipe.local.teams_declaration import TeamsFileInvalid
from tests.conftest import ROOT, minimal_request
from tests.e2e.test_e2e import FAST_RETRY, Local, running_stack
from tests.harness.patience import ceiling

pytestmark = pytest.mark.slow
TEAMS_FILE = ROOT / "examples" / "teams" / "teams.yaml"
SECRETS = {
    "vision": {"name": "hf-vision", "key": "token"},
    "speech": {"name": "hf-speech", "key": "token"},
}


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Local]:
    yield from running_stack(tmp_path_factory.mktemp("teams-stack"), teams_file=str(TEAMS_FILE))


def _request(local: Local, team: str, **fields: Any) -> Path:
    fields.setdefault("request_id", f"{team}-{uuid.uuid4().hex[:10]}")
    path = local.tmp / f"{fields['request_id']}.yaml"
    path.write_text(
        yaml.safe_dump(minimal_request(hf_token_secret=SECRETS[team], retry=FAST_RETRY, **fields))
    )
    return path


def _namespaces_until_done(local: Local, run_ids: list[str]) -> dict[str, set[str]]:
    """The namespaces each run's workloads were seen in, from the cluster's own listing, until the
    runs end."""
    seen: dict[str, set[str]] = {run_id: set() for run_id in run_ids}
    deadline = time.monotonic() + ceiling(40)
    while time.monotonic() < deadline:
        for workload, namespace in local.stack.placed().items():
            for run_id in run_ids:
                if workload.startswith(run_id):
                    seen[run_id].add(namespace)
        records = [local.ledger.get(r) for r in run_ids]
        if all(r is not None and r.terminal for r in records):
            return seen
        time.sleep(0.2)
    raise AssertionError(f"runs not done: {[local.ledger.get(r) for r in run_ids]}\n{local.stack.logs}")


def test_each_teams_folder_and_topic_make_its_runs_in_its_namespace(local: Local) -> None:
    repo = f"vision-org/e2e-{uuid.uuid4().hex[:8]}"  # vision's own organisation, with its own write token
    publish = {"repo": repo, "token_secret": {"name": "hf-vision-write", "key": "token"}}
    vision = submit_cli.submit(
        local.settings,
        _request(local, "vision", publish=publish),
        via="gcs",
        team="vision",
        storage_client=local.client,
    )
    speech = submit_cli.submit(local.settings, _request(local, "speech"), via="pubsub", team="speech")
    assert vision.where.startswith(f"gs://{local.settings.requests_bucket}/requests/vision/")

    seen = _namespaces_until_done(local, [vision.run_id, speech.run_id])
    assert seen == {vision.run_id: {"rlpipe-vision"}, speech.run_id: {"rlpipe-speech"}}
    by_folder, by_topic = local.ledger.get(vision.run_id), local.ledger.get(speech.run_id)
    assert by_folder is not None and by_topic is not None
    assert (by_folder.team, by_folder.state) == ("vision", "succeeded"), by_folder.failure
    assert (by_topic.team, by_topic.state) == ("speech", "succeeded"), by_topic.failure
    assert by_topic.source.kind == "pubsub" and (by_topic.source.topic or "").endswith(
        "/rlpipe-requests-speech"
    )
    assert by_folder.lineage.published_commit, "the publish step read vision's write token in rlpipe-vision"
    # Each team's run wrote only under its team's prefix of the artifacts bucket (the prefix its
    # operators alone may read, infra/terraform/teams.tf): data, code, checkpoints, export, and
    # the conversion it made. Nothing of it is under the deployment's runs/ or cache/.
    for record in (by_folder, by_topic):
        team, run_id = record.team, record.run_id
        written = [
            b.name
            for b in local.client.list_blobs(local.settings.artifacts_bucket)
            if run_id in b.name  # its run prefix, and its conversion attempt (<key>/<run>-a<N>/)
        ]
        assert any(n.startswith(f"teams/{team}/runs/{run_id}/trained/") for n in written), written[:5]
        assert any(n.startswith(f"teams/{team}/runs/{run_id}/hf/") for n in written), written[:5]
        assert any(n.startswith(f"teams/{team}/cache/maxtext/") for n in written), written[:5]
        assert all(n.startswith(f"teams/{team}/") for n in written), [
            n for n in written if not n.startswith(f"teams/{team}/")
        ][:5]
        assert record.lineage.export_uri.endswith(f"/teams/{team}/runs/{run_id}/hf/")


def test_a_message_on_the_deployments_own_topic_is_no_teams_and_is_refused(local: Local) -> None:
    """The deployment's requests topic is still routed (as Terraform keeps it); with teams declared
    intake refuses what arrives there, naming the teams' topics."""
    settings = local.settings
    topic = settings.topic_path(settings.requests_topic)
    message_id = submit_cli._publish(settings, topic, yaml.safe_dump(minimal_request()).encode())
    from rlpipe.core import identity

    delivery = identity.run_id_for(identity.key_for_message(topic, message_id))
    deadline = time.monotonic() + ceiling(10)
    while time.monotonic() < deadline and local.ledger.rejection(delivery) is None:
        time.sleep(0.2)
    rejection = local.ledger.rejection(delivery)
    assert rejection is not None, local.stack.logs
    [problem] = rejection["problems"]
    assert "a topic no team owns" in problem["message"] and "rlpipe-requests-vision" in problem["fix"]


def test_a_teams_file_that_is_no_declaration_stops_the_stack_before_anything_starts(tmp_path: Path) -> None:
    """A copy of the example with one setting misspelt: the stack names the file and the field."""
    broken = tmp_path / "teams.yaml"
    broken.write_text(TEAMS_FILE.read_text().replace("read_secrets:", "read_secret:", 1))
    stack = LocalStack(StackConfig(root=tmp_path / "stack", teams_file=str(broken)), say=lambda text: None)
    with pytest.raises(TeamsFileInvalid) as refused:
        stack.start()
    assert f"{broken}.vision.read_secret: is not a team setting" in str(refused.value)
    assert stack.children == {} and not (tmp_path / "stack" / "logs").exists()


def _sweep_children(local: Local, parent_id: str) -> list[RunRecord]:
    parent = local.ledger.get(parent_id)
    assert parent is not None and parent.sweep is not None
    return [c for c in (local.ledger.get(i) for i in parent.sweep.children) if c is not None]


def _most_at_once(children: list[RunRecord], stages: tuple[str, ...]) -> int:
    """The most children whose TPU work (``stages``' attempts) overlapped, from their recorded times."""
    spans = []
    for child in children:
        times = [(a.launched_at, a.finished_at or "~") for a in child.attempts if a.stage in stages]
        if times:
            spans.append((min(t[0] for t in times), max(t[1] for t in times)))
    edges = sorted(
        [(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans], key=lambda e: (e[0], e[1])
    )
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def test_a_teams_sweep_with_more_children_than_its_places_ends_with_a_winner(local: Local) -> None:
    """The deadlock users met: vision has 4 places (limits.active_runs) and a sweep of 6 children,
    with a plain vision run submitted while it runs; speech has 2 places for sweep children
    (limits.sweep_children) and a sweep of 3. Every run ends, each sweep with a winner: a child
    gives its place back when it reaches its sweep's selection, so the children still to train get
    places. One conversion serves each sweep (its team's cache), and no more children than the
    team's places ever train at once."""
    # Each sweep's own conversion-cache key (an image tag only it uses): the module's other runs
    # converted the same repository, and its team's cache would serve them.
    image = "us-docker.pkg.dev/cloud-tpu-images/maxtext-images/tpu_post_training:sweep-{}".format
    grid6 = {"maxtext_overrides.rl.grpo_beta": [0.01, 0.02, 0.04, 0.08, 0.16, 0.32]}
    grid3 = {"maxtext_overrides.rl.grpo_beta": [0.02, 0.04, 0.08]}
    select = {"metric": "post_mean_reward"}

    def sweep(team: str, grid: dict[str, list[float]], via: str) -> str:
        fields = {"grid": grid, "max_parallel": len(next(iter(grid.values()))), "select": select}
        path = _request(local, team, image=image(uuid.uuid4().hex[:8]), sweep=fields)
        client = local.client if via == "gcs" else None
        return submit_cli.submit(local.settings, path, via=via, team=team, storage_client=client).run_id

    vision_sweep, speech_sweep = sweep("vision", grid6, "gcs"), sweep("speech", grid3, "pubsub")
    plain = submit_cli.submit(
        local.settings, _request(local, "vision"), via="gcs", team="vision", storage_client=local.client
    )
    ids = [vision_sweep, speech_sweep, plain.run_id]
    deadline = time.monotonic() + ceiling(120)
    while time.monotonic() < deadline:
        records = [local.ledger.get(r) for r in ids]
        if all(r is not None and r.terminal for r in records):
            break
        time.sleep(0.5)
    records = [local.ledger.get(r) for r in ids]
    assert [r.state if r else None for r in records] == ["succeeded"] * 3, [
        (c.run_id, c.state, c.admission and c.admission.reason)
        for p in ids[:2]
        for c in _sweep_children(local, p)
    ]
    for parent_id, size, places in ((vision_sweep, 6, 4), (speech_sweep, 3, 2)):
        parent = local.ledger.get(parent_id)
        assert parent is not None and parent.sweep is not None and parent.sweep.selection is not None
        children = _sweep_children(local, parent_id)
        assert len(children) == size and all(c.state == "succeeded" for c in children)
        assert [c.lineage.sweep.selected for c in children if c.lineage.sweep].count(True) == 1
        assert [a.stage for c in children for a in c.attempts].count("convert") == 1
        assert _most_at_once(children, ("convert", "train", "export")) <= places
