"""The ``reader`` part: MaxText's own reading of each line of the differential corpus.

One driver process (``drivers/read_values.py``) runs pyconfig on every line and keeps what it would
hand to pydantic; ``tests/programs/test_programs_reader_differential.py`` reads each line again with rlpipe's
reader and compares.
"""

from __future__ import annotations

from typing import Any

from programs import process


def run(job: dict[str, Any], run: process.Run) -> dict[str, Any]:
    return process.driver(run.python, "read_values.py", job, run.work)
