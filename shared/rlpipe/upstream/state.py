"""What the poller has already decided about a repo: ``upstream/<repo>/state.json`` (state bucket).

The state is what makes polling cheap and quiet: a commit already examined (released, ignored,
or taken as the baseline) is not examined again, and a gated repo's "accept the license"
message is sent once per commit, not every tick. It is written only with generation
preconditions (create-if-absent, then compare-and-swap), so two pollers never lose each other's
update. It is written *after* intake accepted a release: a crash in between leaves the release
unrecorded, the next tick submits it again, and intake's idempotency key makes that harmless.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rlpipe.control.adapters import blobstore
from rlpipe.core import layout
from rlpipe.core.runs.record import now

HISTORY = 20  # decisions kept per watch entry
CAS_ATTEMPTS = 8


def state_path(repo: str) -> str:
    """The repo's state object: ``layout.upstream_state`` (every object name in one place)."""
    return layout.upstream_state(repo)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Snapshot(_Model):
    """A commit and the content id of each of its files (see ``upstream_release.file_ids``)."""

    sha: str
    files: dict[str, str]
    at: str = Field(default_factory=now)


class Examined(Snapshot):
    outcome: Literal["baseline", "released", "ignored"]


class Release(_Model):
    sha: str
    run_id: str
    key: str
    changed: list[str]
    at: str = Field(default_factory=now)


class NoAccess(_Model):
    sha: str | None
    message: str
    notified: bool
    at: str = Field(default_factory=now)


class Decision(_Model):
    sha: str | None
    outcome: str
    detail: str
    at: str = Field(default_factory=now)


class WatchState(_Model):
    """One watch entry (branch + template) of a repo."""

    branch: str
    template_hash: str
    baseline: Snapshot | None = None  # the processed sha: releases are changes against it
    examined: Examined | None = None  # the newest head decided on; never examined again
    last_release: Release | None = None
    no_access: NoAccess | None = None
    history: list[Decision] = Field(default_factory=list)

    def remember(self, decision: Decision) -> None:
        self.history = [*self.history, decision][-HISTORY:]


class RepoState(_Model):
    version: Literal[1] = 1
    repo: str
    watches: dict[str, WatchState] = Field(default_factory=dict)
    updated_at: str = Field(default_factory=now)


class ConcurrentUpdate(Exception):
    """The state kept changing under us; the next tick tries again."""


class StateStore:
    def __init__(self, store: blobstore.BlobStore, *, sleep: Callable[[float], None] = time.sleep):
        self.store = store
        self.sleep = sleep

    def load(self, repo: str) -> tuple[RepoState, int | None]:
        """The repo's state and its generation (None when nothing was written yet)."""
        try:
            data, generation = self.store.read_json(state_path(repo))
        except blobstore.NotFound:
            return RepoState(repo=repo), None
        return RepoState.model_validate(data), generation

    def get(self, repo: str, key: str) -> WatchState | None:
        return self.load(repo)[0].watches.get(key)

    def update(
        self, repo: str, key: str, change: Callable[[WatchState | None], WatchState | None]
    ) -> WatchState | None:
        """Apply ``change`` to one entry's state under CAS; ``change`` returns None for "nothing to write".

        ``change`` may run more than once (after a lost race it sees the winner's state), so it
        must decide from what it is given, never from what it saw earlier.
        """
        for attempt in range(CAS_ATTEMPTS):
            state, generation = self.load(repo)
            updated = change(state.watches.get(key))
            if updated is None:
                return state.watches.get(key)
            state.watches[key] = updated
            state.updated_at = now()
            data = blobstore.dumps(state.model_dump(mode="json"))
            if generation is None:
                if self.store.create(state_path(repo), data) is not None:
                    return updated
            else:
                try:
                    self.store.replace(state_path(repo), data, generation)
                    return updated
                except blobstore.PreconditionFailed:
                    pass
            self.sleep(min(0.05 * 2**attempt, 1.0) * random.uniform(0.5, 1.5))
        raise ConcurrentUpdate(f"upstream state of {repo} changed under us {CAS_ATTEMPTS} times")
