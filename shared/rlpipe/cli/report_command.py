"""``rlpipe report RUN [-o FILE]``: the run's page (``rlpipe.report``) written where you ask."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlpipe.report import write_report


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def read_receipt(settings: Any, record: dict[str, Any]) -> dict[str, Any] | None:
    """The run's publish receipt from the artifacts bucket (operators may read it), only when the
    report needs it: a publish attempt succeeded and the ledger records no commit. Best effort: a
    receipt that cannot be read leaves the commit unknown, and the page says so."""
    lineage_commit = _dict(record.get("lineage")).get("published_commit")
    done = any(
        _dict(a).get("stage") == "publish" and _dict(a).get("phase") == "succeeded"
        for a in record.get("attempts") or []
    )
    if lineage_commit or not done:
        return None
    try:
        from rlpipe.control.blobstore import BlobStore, make_client
        from rlpipe.core.layout import RunLayout

        store = BlobStore(make_client(settings.project), settings.artifacts_bucket)
        data = store.read(RunLayout(settings.artifacts_bucket, str(record["run_id"])).publish_receipt).json()
    except Exception as exc:  # the report is still worth writing without the commit
        print(
            f"note: could not read the publish receipt ({type(exc).__name__}); commit not shown",
            file=sys.stderr,
        )
        return None
    return data if isinstance(data, dict) else None


def cmd_report(
    args: argparse.Namespace,
    settings: Callable[[], Any],
    ledger: Callable[[Any], Any],
    receipt: Callable[[Any, dict[str, Any]], dict[str, Any] | None] = read_receipt,
) -> int:
    chosen = settings()
    record = ledger(chosen).get(args.run)
    if record is None:
        print(f"no run {args.run}", file=sys.stderr)
        return 1
    data = record.model_dump(mode="json")
    try:
        path = write_report(
            data, Path(args.output or f"{args.run}-report.html"), receipt=receipt(chosen, data)
        )
    except ModuleNotFoundError as exc:  # the CLI extra is not installed
        print(f"rlpipe report needs {exc.name}: pip install 'rlpipe[cli]'", file=sys.stderr)
        return 1
    print(f"wrote {path}")
    return 0


def register(
    subparsers: Any,
    *,
    settings: Callable[[], Any],
    ledger: Callable[[Any], Any],
    receipt: Callable[[Any, dict[str, Any]], dict[str, Any] | None] = read_receipt,
) -> None:
    """Add ``report`` to the ``rlpipe`` parser; ``settings`` picks the deployment, ``ledger(settings)``
    opens its ledger (``cli.main._settings`` and ``cli.main._ledger``), ``receipt(settings, record)``
    reads the publish receipt when the ledger lacks the commit."""
    p = subparsers.add_parser(
        "report",
        help="write one self-contained HTML page for a run: rounds, timeline, rewards, lineage, gate, publish",
    )
    p.add_argument("run")
    p.add_argument("-o", "--output", metavar="FILE", help="where to write it (default RUN-report.html)")
    p.set_defaults(func=lambda args: cmd_report(args, settings, ledger, receipt))
