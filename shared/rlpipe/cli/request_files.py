"""The request files the CLI reads, checked as this deployment's intake would check them: the
policy (the deployment's allowlists when its settings are in the environment), the request's own
files beside it, and, on demand, the Hub (``--hub``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any


def read_request(path: str) -> Any:
    """The request, its own files checked as intake will check them: beside the file on disk (a
    gs:// file is read by intake, not here). Raises ``RequestInvalid``."""
    from rlpipe.control.lifecycle import user_files
    from rlpipe.core.request import load_request

    data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    req = load_request(data, source=path, policy=policy())
    neighbours = None if path == "-" else user_files.disk_neighbours(Path(path))
    user_files.gather(req, read_relative=neighbours, read_gcs=None)
    return req


def hub_pins(req: Any) -> tuple[str, dict[str, Any]]:
    """``--hub``: the model's commit and the datasets' pins, made now as the pipeline's plan will
    make them, with this machine's Hub token (``HF_TOKEN``/``RLPIPE_HF_TOKEN``). Raises
    ``PermanentFailure`` (naming the field) or ``TransientFailure``."""
    from rlpipe.control.adapters import hub_client
    from rlpipe.control.lifecycle import data_pins

    return hub_client.resolve_revision(req.hf_repo, req.hf_revision), data_pins.pin(req)


def hub_pins_or_exit(req: Any, who: str) -> tuple[str, dict[str, Any], list[str]]:
    """:func:`hub_pins`, with one line per pin; a refusal is printed naming the field and ends the
    command (exit 1), a Hub that does not answer too (exit 75, worth trying again)."""
    from rlpipe.control.lifecycle import data_pins
    from rlpipe.core.failures import PermanentFailure, TransientFailure

    try:
        sha, data = hub_pins(req)
    except PermanentFailure as exc:
        print(f"{who}: {exc.reason}", file=sys.stderr)
        raise SystemExit(1) from None
    except TransientFailure as exc:
        print(f"{who}: the Hub could not be checked: {exc.reason}", file=sys.stderr)
        raise SystemExit(75) from None
    return sha, data, [f"model: {req.hf_repo}@{sha[:12]} ({req.hf_revision})", *data_pins.summary(data)]


# Settings that change what a request may reach (rlpipe.control.adapters.settings; terraform's cli_env
# exports them): with any of them set, the CLI checks requests as this deployment's intake would.
_POLICY_SETTINGS = (
    "RLPIPE_PROJECT",
    "RLPIPE_ARTIFACTS_BUCKET",  # the run's own gs:// prefix is in it
    "RLPIPE_ALLOWED_IMAGE_PREFIXES",
    "RLPIPE_ALLOWED_ENV",
    "RLPIPE_READ_TOKEN_SECRETS",
    "RLPIPE_WRITE_TOKEN_SECRETS",
    "RLPIPE_ALLOW_USER_CODE",
    "RLPIPE_READ_ONLY_GCS_PREFIXES",
    "RLPIPE_NOTIFY_TOPICS",
    "RLPIPE_STATUS_TOPIC",  # notify may name it
    "RLPIPE_REQUESTS_TOPIC",  # notify may never name it
    "RLPIPE_ALLOWED_LABEL_PREFIXES",
    "RLPIPE_MAX_SWEEP_CHILDREN",
    "RLPIPE_ALLOWED_PUBLISH_REPOS",
    "RLPIPE_ALLOWED_QUEUES",
    "RLPIPE_ALLOWED_RESERVATIONS",
    "RLPIPE_ALLOWED_NODE_POOLS",
)


def policy() -> Any:
    """The deployment's allowlists when its settings are in the environment, else the defaults."""
    import os

    from rlpipe.control.adapters.settings import Settings
    from rlpipe.core.request.policy import Policy

    present = [name for name in _POLICY_SETTINGS if name in os.environ]
    if not present:
        return Policy(source="the built-in defaults (no RLPIPE_* deployment settings in the environment)")
    return Settings.from_env().policy(f"this deployment's settings ({', '.join(present)})")
