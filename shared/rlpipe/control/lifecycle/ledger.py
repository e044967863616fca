"""The run ledger: a run's durable record in GCS, written only with generation preconditions.

It lives in the state bucket (``Settings.state_bucket``), apart from the artifacts the workloads
write: the workload identity has no access there, so no training container can rewrite a ledger.

``runs/<run_id>/run.json`` is created once with ``if_generation_match=0`` (the claim); every
later write is a compare-and-swap on the generation that was read, retried a bounded number of
times on 412 by re-reading and re-applying the change. Each successful write also leaves a small,
never-rewritten history object ``runs/<run_id>/events/<seq>-<what>.json``.

This module is the store only: the record itself, its state machine and the pure rules that
change it are the core's (``core.runs``).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from rlpipe.control.adapters import blobstore, interleave
from rlpipe.core import layout
from rlpipe.core.runs.record import RunRecord, now

T = TypeVar("T")

CAS_ATTEMPTS = 8
# The character right after "/" in byte order: "runs/<id>0" sorts after every "runs/<id>/...".
_AFTER_SLASH = chr(ord("/") + 1)


class ConcurrentUpdate(Exception):
    """CAS kept losing: too many writers at once. Callers treat it as transient."""


class Ledger:
    """Reads and writes run records in the state bucket (``store``), which no workload can write."""

    def __init__(self, store: blobstore.BlobStore, *, sleep: Callable[[float], None] = time.sleep):
        self.store = store
        self.sleep = sleep

    def layout(self, run_id: str) -> layout.RunLayout:
        return layout.RunLayout(self.store.bucket_name, run_id)

    def claim(self, record: RunRecord) -> bool:
        """Create the record if no one has; True only for the caller that created it."""
        run = self.layout(record.run_id)
        generation = self.store.create(run.ledger, blobstore.dumps(record.model_dump(mode="json")))
        if generation is None:
            return False
        self._event(
            record.run_id,
            1,
            "accepted",
            {"state": record.state, "key": record.key, "source": record.source.model_dump(exclude_none=True)},
        )
        return True

    def load(self, run_id: str) -> tuple[RunRecord, int]:
        data, generation = self.store.read_json(self.layout(run_id).ledger)
        return RunRecord.model_validate(data), generation

    def get(self, run_id: str) -> RunRecord | None:
        try:
            return self.load(run_id)[0]
        except blobstore.NotFound:
            return None

    def peek(self, run_id: str) -> RunRecord | None:
        """The record in one GET (no metadata request, so no generation): for scans that only
        decide whether to act, such as the reconciler reading thousands of ledgers. Every write
        still goes through ``update``, which re-reads under compare-and-swap."""
        body = self.store.download(self.layout(run_id).ledger)
        return RunRecord.model_validate_json(body) if body is not None else None

    def update(
        self,
        run_id: str,
        change: Callable[[RunRecord], tuple[str | None, T]],
        *,
        detail: Callable[[RunRecord], dict[str, Any]] | None = None,
    ) -> tuple[RunRecord, T]:
        """Apply ``change`` under compare-and-swap, re-reading and re-applying on conflict.

        ``change`` mutates the record it is given and returns (the event to record, or None for
        "nothing to do"; what it decided). The answer is the record as written (as read, when
        there was nothing to do) and what ``change`` decided on that record: a compare-and-swap
        that lost applies ``change`` again to a newer record, and only that last decision counts,
        so nothing a lost application decided reaches the caller."""
        for attempt in range(CAS_ATTEMPTS):
            record, generation = self.load(run_id)
            interleave.point("ledger.update:read")
            what, decided = change(record)
            if what is None:
                return record, decided
            record.seq += 1
            record.updated_at = now()
            try:
                self.store.replace(
                    self.layout(run_id).ledger, blobstore.dumps(record.model_dump(mode="json")), generation
                )
            except blobstore.PreconditionFailed:
                self.sleep(min(0.05 * 2**attempt, 1.0) * random.uniform(0.5, 1.5))
                continue
            self._event(run_id, record.seq, what, detail(record) if detail else {"state": record.state})
            return record, decided
        raise ConcurrentUpdate(f"run {run_id}: ledger changed under us {CAS_ATTEMPTS} times")

    def edit(
        self,
        run_id: str,
        change: Callable[[RunRecord], str | None],
        *,
        detail: Callable[[RunRecord], dict[str, Any]] | None = None,
    ) -> RunRecord:
        """``update`` for a change that decides nothing beyond its event (None: nothing to do)."""
        return self.update(run_id, lambda r: (change(r), None), detail=detail)[0]

    def _event(self, run_id: str, seq: int, what: str, detail: dict[str, Any]) -> None:
        body = {"run_id": run_id, "seq": seq, "event": what, "time": now(), **detail}
        self.store.create(self.layout(run_id).event(seq, what), blobstore.dumps(body))

    def note(self, run_id: str, what: str, detail: dict[str, Any]) -> None:
        """A history event that changes nothing in the record (e.g. a duplicate delivery seen)."""
        self.edit(run_id, lambda r: what, detail=lambda r: detail)

    def history(self, run_id: str) -> list[dict[str, Any]]:
        names = sorted(self.store.list(self.layout(run_id).events_prefix))
        return [self.store.read(n).json() for n in names]

    def rejection(self, run_id: str) -> dict[str, Any] | None:
        """The rejection record written for ``run_id`` (``write_error``), if any."""
        return self._record(self.layout(run_id).error)

    def _record(self, name: str) -> dict[str, Any] | None:
        """A JSON object the control plane wrote once, if it is there and reads as one."""
        try:
            body = self.store.read(name).json()
        except (blobstore.NotFound, ValueError):
            return None
        return body if isinstance(body, dict) else None

    def write_error(self, run_id: str, body: dict[str, Any]) -> bool:
        """The readable rejection record of a request that never became a run (written once)."""
        run = self.layout(run_id)
        created = self.store.create(run.error, blobstore.dumps(body)) is not None
        if created:
            self._event(
                run_id, 0, "rejected", {"problems": body.get("problems", []), "source": body.get("source")}
            )
        return created

    def write_delivery(self, delivery_id: str, body: dict[str, Any]) -> bool:
        """Which run a delivery went to, when its id is not the run's (a ``request_id`` named the
        run): written once, so a redelivery of the same event leaves the first answer."""
        return self.store.create(self.layout(delivery_id).delivery, blobstore.dumps(body)) is not None

    def delivery(self, delivery_id: str) -> dict[str, Any] | None:
        """The record :meth:`write_delivery` left for ``delivery_id``, if any."""
        return self._record(self.layout(delivery_id).delivery)

    def list_run_ids(self) -> list[str]:
        ids = set()
        for name in self.store.list(layout.RUNS_PREFIX):
            parts = name.split("/")
            if len(parts) >= 3 and parts[2] == "run.json":
                ids.add(parts[1])
        return sorted(ids)

    def list_run_ids_page(self, after: str = "", limit: int = 500) -> RunIdPage:
        """Up to ``limit`` run ids that sort after ``after``, in listing order, without listing
        any run's objects: a delimiter listing of ``runs/`` returns one prefix per run, starting
        at an offset past ``after``'s own objects, so a scan of thousands of runs resumes from a
        cursor instead of re-reading every checkpoint and event name.

        Prefixes without a ``run.json`` (a rejected request's ``error.json``) are included; the
        caller finds no ledger there. Order is that of ``"<id>/"`` (the bucket's byte order).
        """
        if limit < 1:
            raise ValueError("limit must be >= 1")
        start = f"{layout.RUNS_PREFIX}{after}{_AFTER_SLASH}" if after else layout.RUNS_PREFIX
        prefixes, beyond = self.store.prefixes_page(layout.RUNS_PREFIX, after=start, limit=limit)
        found = {p[len(layout.RUNS_PREFIX) : -1] for p in prefixes}
        ids = sorted((i for i in found if i and _order(i) > _order(after)), key=_order)
        more = len(ids) > limit or beyond
        return RunIdPage(ids[:limit], more)

    def last_event(self, run_id: str, what: str) -> dict[str, Any] | None:
        """The newest history event named ``what`` (one listing and one read), or None."""
        suffix = f"-{what}.json"
        names = sorted(n for n in self.store.list(self.layout(run_id).events_prefix) if n.endswith(suffix))
        return self._record(names[-1]) if names else None

    def has_event(self, run_id: str, what: str) -> bool:
        """Whether the run's history holds an event named ``what`` (for notes written once)."""
        suffix = f"-{what}.json"
        return any(name.endswith(suffix) for name in self.store.list(self.layout(run_id).events_prefix))


@dataclass(frozen=True)
class RunIdPage:
    run_ids: list[str]
    more: bool  # more ids may follow the last one (ask again with after=run_ids[-1])


def _order(run_id: str) -> str:
    return run_id + "/" if run_id else ""
