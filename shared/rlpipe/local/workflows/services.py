"""What a running execution may touch outside itself, gathered in one object.

Standard-library functions receive this instead of reaching for globals, so a
test can give an execution a fake clock, a fixed environment and its own
callback registry.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .clock import Clock

if TYPE_CHECKING:
    from .callbacks import CallbackRegistry
    from .http_client import HttpClient


@dataclass
class ExecutionServices:
    execution_name: str
    clock: Clock
    cancel: threading.Event
    env: Mapping[str, str]
    http: HttpClient
    callbacks: CallbackRegistry
    log: Callable[[str, Any], None]
