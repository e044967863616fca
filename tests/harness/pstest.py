"""Google's Pub/Sub fake (pstest, built by `make components`) for a test module, or why not.

Why one place: a test that needs pstest skips where it is not built, but fails under CI=true,
where `make test` builds it; each module starting its own must say the same.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rlpipe.local import pubsub


def start_pstest(root: Path) -> pubsub.PubSubEmulator:
    """pstest started under ``root``; skips (fails under CI) when it is not built."""
    if pubsub.pstest_binary() is None:
        reason = pubsub.unavailable_reason() or "pstest is not built"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI builds pstest, but: {reason}")
        pytest.skip(reason)
    return pubsub.PubSubEmulator(root).start()
