"""``rlpipe report RUN [-o FILE]``: the run's page (``rlpipe.report``) written where you ask.

A sweep's parent has no run page of its own (it runs nothing): its report is the comparison page
of its children (``rlpipe.report.compare``, as ``rlpipe compare`` draws it), naming the sweep and
each child's point, with the child the sweep selected marked and the selection's reason (or, when
nothing was published, why).

On the local stack every page says it was simulated and on which cluster: the deployment's
settings say so (``control.lifecycle.run_report.local_cluster``), as they do for the copy the control plane
keeps."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlpipe.cli import charts
from rlpipe.cli.exit_codes import ExitCode
from rlpipe.cli.output_files import output_path, write_page
from rlpipe.core.runs.record import RunRecord
from rlpipe.report import render_report


def read_receipt(settings: Any, record: RunRecord) -> dict[str, Any] | None:
    """The run's publish receipt from the artifacts bucket (operators may read it), only when the
    report needs it: a publish attempt succeeded and the ledger records no commit. Best effort: a
    receipt that cannot be read leaves the commit unknown, and the page says so."""
    done = any(a.stage == "publish" and a.phase == "succeeded" for a in record.attempts)
    if record.lineage.published_commit or not done:
        return None
    try:
        from rlpipe.control.adapters.blobstore import BlobStore, make_client
        from rlpipe.core.layout import RunLayout

        store = BlobStore(make_client(settings.project), settings.artifacts_bucket)
        scope = settings.teams().cache_scope(record.team)  # a team's run: under its own prefix
        data = store.read(
            RunLayout(settings.artifacts_bucket, record.run_id, scope=scope).publish_receipt
        ).json()
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
    receipt: Callable[[Any, RunRecord], dict[str, Any] | None] = read_receipt,
) -> int:
    chosen = settings()
    opened = ledger(chosen)
    record = opened.get(args.run)
    if record is None:
        print(f"no run {args.run}", file=sys.stderr)
        return 1
    path = output_path(args.output, f"{args.run}-report.html")
    from rlpipe.control.lifecycle.run_report import local_cluster

    cluster = local_cluster(chosen)
    try:
        if record.sweep is not None:
            prices = str(getattr(chosen, "prices_json", "") or "")
            return sweep_report(record, opened, path, prices, lambda child: receipt(chosen, child), cluster)
        html = render_report(record, receipt=receipt(chosen, record), cluster=cluster, painter=charts)
    except ModuleNotFoundError as exc:  # the CLI extra is not installed
        print(f"rlpipe report needs {exc.name}: pip install 'rlpipe[cli]'", file=sys.stderr)
        return 1
    write_page(path, html)
    print(f"wrote {path}")
    return 0


def sweep_report(
    parent: Any,
    opened: Any,
    path: Path,
    prices_json: str = "",
    receipt: Callable[[RunRecord], dict[str, Any] | None] = lambda child: None,
    cluster: str | None = None,
) -> int:
    """The page of a sweep's children (those claimed, in point order), naming the sweep and each
    child's point, the selected one marked with the selection's reason; a sweep of one child has
    that child's run page instead."""
    from rlpipe.report.compare import render_compare
    from rlpipe.report.sweep_page import sweep_facts

    children = [c for c in (opened.get(run_id) for run_id in parent.sweep.children) if c is not None]
    if not children:
        print(f"sweep {parent.run_id}: none of its children is in the ledger yet", file=sys.stderr)
        return ExitCode.NOT_FOUND  # nothing to report on yet
    if len(children) == 1:  # nothing to compare it with
        write_page(
            path, render_report(children[0], receipt=receipt(children[0]), cluster=cluster, painter=charts)
        )
        print(f"wrote {path} (sweep {parent.run_id} has one child, {children[0].run_id}: its run page)")
        return 0
    facts = sweep_facts(parent, children)
    html = render_compare(children, prices_json=prices_json, cluster=cluster, sweep=parent, painter=charts)
    write_page(path, html)
    print(f"wrote {path} (sweep {parent.run_id}: {len(children)} children compared)")
    selection = parent.sweep.selection
    if facts.nothing_published is not None:
        print(f"  nothing was published: {facts.nothing_published}")
    elif selection is None:
        print("  no child is selected yet: the rule is applied once every child has ended")
    elif facts.selected is None:
        print(f"  no child could be selected: {selection.reason}")
    else:
        print(f"  selected {facts.selected}: {selection.reason}")
    return 0


def register(
    subparsers: Any,
    *,
    settings: Callable[[], Any],
    ledger: Callable[[Any], Any],
    receipt: Callable[[Any, RunRecord], dict[str, Any] | None] = read_receipt,
) -> None:
    """Add ``report`` to the ``rlpipe`` parser; ``settings`` picks the deployment, ``ledger(settings)``
    opens its ledger (``cli.main._settings`` and ``cli.main._ledger``), ``receipt(settings, record)``
    reads the publish receipt when the ledger lacks the commit."""
    p = subparsers.add_parser(
        "report",
        help="write one self-contained HTML page for a run: rounds, timeline, rewards, lineage, gate, publish "
        "(a sweep: the comparison of its children, the selected one marked)",
    )
    p.add_argument("run")
    p.add_argument("-o", "--output", metavar="FILE", help="where to write it (default RUN-report.html)")
    p.set_defaults(func=lambda args: cmd_report(args, settings, ledger, receipt))
