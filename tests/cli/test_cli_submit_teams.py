"""``rlpipe submit --team``: on a deployment with teams (RLPIPE_TEAMS) a submission goes as one
team, into its folder or on its topic, checked against that team's allowlists; a team the
deployment does not declare is refused before anything is uploaded, naming the declared ones.

The declaration is examples/teams/teams.yaml, as ``rlpipe local up --teams`` reads it; the CLI
runs through its own ``main`` against fake-gcs-server."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlpipe.cli import submit as submit_cli
from rlpipe.cli.exit_codes import CliError, ExitCode
from rlpipe.control.adapters.settings import Settings
from rlpipe.local.teams_declaration import read_teams_file
from tests.conftest import ROOT, Buckets
from tests.harness.cli import run_main

TEAMS_FILE = ROOT / "examples" / "teams" / "teams.yaml"
VISION = ROOT / "examples" / "teams" / "vision.yaml"
SPEECH = ROOT / "examples" / "teams" / "speech.yaml"
CROSS_TEAM = ROOT / "examples" / "teams" / "vision-names-speech-secret.yaml"


def _env(buckets: Buckets, teams_file: Path | None = TEAMS_FILE) -> dict[str, str]:
    declared = read_teams_file(teams_file).env_json if teams_file else ""
    return buckets.env(RLPIPE_TARGET="gcp", RLPIPE_TEAMS=declared, RLPIPE_WORKFLOWS_ENDPOINT="127.0.0.1:9")


def _dropped(buckets: Buckets) -> list[str]:
    return [b.name for b in buckets.client.list_blobs(buckets.requests)]


def test_a_teams_request_is_dropped_in_its_folder_and_names_its_team(buckets: Buckets) -> None:
    done = run_main(["submit", str(VISION), "--team", "vision", "--wait", "0"], _env(buckets))
    assert done.returncode == 0, done.stderr
    [name] = _dropped(buckets)
    assert name.startswith("requests/vision/vision-"), name
    assert "requests/vision/" in done.stdout


def test_namespace_names_the_same_team_as_team(buckets: Buckets) -> None:
    done = run_main(["submit", str(SPEECH), "--namespace", "speech", "--wait", "0"], _env(buckets))
    assert done.returncode == 0, done.stderr
    [name] = _dropped(buckets)
    assert name.startswith("requests/speech/")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--team", "audio"], ["no team 'audio'", "vision", "speech"]),
        ([], ["declares teams", "--team NAME"]),
        (["--team", "vision", "--namespace", "speech"], ["name two teams"]),
    ],
    ids=["undeclared-team", "no-team", "two-teams"],
)
def test_a_submission_as_no_declared_team_is_refused_before_anything_is_uploaded(
    buckets: Buckets, args: list[str], words: list[str]
) -> None:
    done = run_main(["submit", str(VISION), *args, "--wait", "0"], _env(buckets))
    assert done.returncode == ExitCode.USAGE, done.stdout + done.stderr
    assert all(word in done.stderr for word in words), done.stderr
    assert _dropped(buckets) == []


def test_a_team_missing_from_a_changed_declaration_is_refused_naming_the_teams_left(
    buckets: Buckets, tmp_path: Path
) -> None:
    """The declaration is read where the submission is made: a copy without vision refuses vision."""
    changed = tmp_path / "teams.yaml"
    document = yaml.safe_load(TEAMS_FILE.read_text())
    del document["teams"]["vision"]
    changed.write_text(yaml.safe_dump(document))
    done = run_main(["submit", str(VISION), "--team", "vision", "--wait", "0"], _env(buckets, changed))
    assert done.returncode == ExitCode.USAGE and "its teams are speech" in done.stderr, done.stderr
    assert _dropped(buckets) == []


def test_team_on_a_deployment_without_teams_is_refused(buckets: Buckets) -> None:
    done = run_main(["submit", str(VISION), "--team", "vision", "--wait", "0"], _env(buckets, None))
    assert done.returncode == ExitCode.USAGE and "declares no teams" in done.stderr, done.stderr
    assert _dropped(buckets) == []


def test_a_request_naming_another_teams_secret_is_refused_by_its_teams_allowlist_before_upload(
    buckets: Buckets, tmp_path: Path
) -> None:
    refused = run_main(["submit", str(CROSS_TEAM), "--team", "vision", "--wait", "0"], _env(buckets))
    assert refused.returncode == ExitCode.INVALID_INPUT, refused.stdout + refused.stderr
    assert "hf_token_secret" in refused.stderr and "teams.vision.read_secrets" in refused.stderr
    # The same file as speech's is speech's own Secret: the refusal was by the team, not the value.
    as_speech = tmp_path / "speech-run.yaml"
    shutil.copy(CROSS_TEAM, as_speech)
    accepted = run_main(["submit", str(as_speech), "--team", "speech", "--wait", "0"], _env(buckets))
    assert accepted.returncode == 0, accepted.stderr
    assert [n.split("/")[1] for n in _dropped(buckets)] == ["speech"]


def test_a_teams_message_goes_on_its_topic_and_its_run_is_keyed_in_its_folder(
    buckets: Buckets, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run id ``submit`` promises is the one intake keys a team's message under (the request_id
    in the team's folder), and the message goes on the team's own topic."""
    published: list[str] = []

    def publish(settings: Any, topic: str, data: bytes) -> str:
        published.append(topic)
        return "m-1"

    monkeypatch.setattr(submit_cli, "_publish", publish)
    for name, value in _env(buckets).items():
        monkeypatch.setenv(name, value)
    settings = Settings.from_env()
    on_topic = submit_cli.submit(settings, SPEECH, via="pubsub", team="speech")
    assert published == [f"projects/{settings.project}/topics/rlpipe-requests-speech"]
    assert on_topic.source["team"] == "speech"
    in_folder = submit_cli.submit(settings, SPEECH, via="gcs", team="speech", storage_client=buckets.client)
    assert on_topic.run_id == in_folder.run_id, "one request_id names one run of the team, however it came"
    with pytest.raises(CliError) as refused:
        submit_cli.submit(settings, SPEECH, via="pubsub", team="audio")
    assert "its teams are speech, vision" in refused.value.message
