"""Watch events: one change in the store, as each watcher's selection sees it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .errors import KubeApiError
from .resources import Obj, Resource
from .selectors import Selection

Listener = Callable[["WatchEvent"], None]


@dataclass(frozen=True)
class WatchEvent:
    """One change in the store; ``old`` is the previous state for MODIFIED."""

    type: str  # ADDED | MODIFIED | DELETED
    resource: Resource
    object: Obj
    old: Obj | None
    resource_version: int

    def for_selection(self, sel: Selection) -> tuple[str, Obj] | None:
        """The event as a watcher with ``sel`` sees it: an object moving in or out of the
        selection is ADDED / DELETED for that watcher, as in the apiserver's watch cache."""
        if self.resource is not sel.resource:
            return None
        now = sel.matches(self.object)
        if self.type == "MODIFIED":
            before = sel.matches(self.old)
            if before and now:
                return "MODIFIED", self.object
            if now:
                return "ADDED", self.object
            if before:
                return "DELETED", self.object
            return None
        return (self.type, self.object) if now else None


class Expired(KubeApiError):
    """410: the requested resourceVersion is older than the retained watch history."""

    def __init__(self, requested: int, oldest: int) -> None:
        super().__init__(410, "Expired", f"too old resource version: {requested} ({oldest})")
