"""A failed program's last words reach its run's record: every container rlpipe renders asks the
kubelet for its last log lines as the termination message (``FallbackToLogsOnError``), and both
local clusters write that message as the kubelet does (k8s v1.34.12,
pkg/kubelet/kuberuntime/kuberuntime_container.go: the last 80 lines, of which the last 2048
bytes, only for a non-zero exit of a container that ran)."""

from __future__ import annotations

from typing import Any

import pytest

from rlpipe.cluster.kinds import last_words
from rlpipe.local.pod_logs import fallback_termination_message

FALLBACK = {"name": "workload-container", "terminationMessagePolicy": "FallbackToLogsOnError"}


def test_the_message_is_the_last_80_lines_each_with_its_newline() -> None:
    lines = [f"line {i}" for i in range(1, 101)]
    message = fallback_termination_message(FALLBACK, 1, "Error", lines)
    assert message is not None
    assert message.splitlines() == [f"line {i}" for i in range(21, 101)]
    assert message.endswith("line 100\n")


def test_a_long_tail_keeps_its_last_2048_bytes() -> None:
    verdict = "ValueError: checkpoint shape mismatch\n"  # 38 bytes
    message = fallback_termination_message(FALLBACK, 1, "Error", ["x" * 3000, verdict.strip()])
    assert message == "x" * (2048 - 38 - 1) + "\n" + verdict  # each line with its newline


@pytest.mark.parametrize(
    ("container", "code", "reason"),
    [
        (FALLBACK, 0, "Completed"),  # a success has no fallback message
        ({"name": "c"}, 1, "Error"),  # the default policy, File: only the termination file
        ({"name": "c", "terminationMessagePolicy": "File"}, 1, "Error"),
        (FALLBACK, 128, "ContainerCannotRun"),  # a container that never ran has no logs
    ],
)
def test_no_message_where_the_kubelet_writes_none(container: dict[str, Any], code: int, reason: str) -> None:
    assert fallback_termination_message(container, code, reason, ["ERROR: it broke"]) is None


def test_a_token_cut_by_the_2048_byte_bound_never_reaches_the_reason() -> None:
    """The kubelet's cut can fall inside a token printed on the first kept line, leaving no
    ``hf_`` for the mask to find: the reader leaves a whole-size message's first line out."""
    secret = "A" * 30
    message = fallback_termination_message(FALLBACK, 1, "Error", [f"token hf_{secret}", "x" * 2030])
    assert message is not None and len(message.encode()) == 2048 and message.startswith("A" * 16)
    words = last_words(message, 5000)
    assert "A" * 16 not in words and words == "x" * 2030
    # A short message keeps every line, its token masked.
    assert last_words(f"token hf_{secret}\nValueError: boom\n") == "token hf_*** ValueError: boom"
