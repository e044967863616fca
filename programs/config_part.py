"""The ``config`` part: MaxText's config reader on every rendered argv, a corpus, the nested keys.

All in one driver process (``drivers/read_config.py``): importing MaxText is most of its time.
"""

from __future__ import annotations

from typing import Any

from programs import process


def run(job: dict[str, Any], run: process.Run) -> dict[str, Any]:
    return process.driver(run.python, "read_config.py", job, run.work)
