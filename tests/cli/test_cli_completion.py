"""`rlpipe completion bash|zsh` (issue 29): the scripts come from the parser itself (shtab), so what
bash offers is exactly what the CLI accepts. The bash script is sourced in a real bash and asked to
complete, as a user's Tab would."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_cli import rlpipe
from tests.conftest import Buckets


def _complete(script: str, words: list[str], env: dict[str, str] | None = None) -> list[str]:
    """COMPREPLY for the command line ``words`` (the last word is the one being completed)."""
    line = " ".join(words)
    program = f"""
source /dev/stdin <<'RLPIPE_COMPLETION'
{script}
RLPIPE_COMPLETION
function=$(complete -p rlpipe | sed -E 's/.*-F ([^ ]+) .*/\\1/')
COMP_WORDS=({line})
COMP_CWORD={len(words) - 1}
COMP_LINE="{line}"
COMP_POINT=${{#COMP_LINE}}
"$function" rlpipe "{words[-1]}" "{words[-2]}"
printf '%s\\n' "${{COMPREPLY[@]}}"
"""
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, check=True, env=env)
    return [w.strip() for w in done.stdout.splitlines() if w.strip()]


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash here")
def test_bash_completes_the_commands_and_options_the_parser_has() -> None:
    made = rlpipe("completion", "bash")
    assert made.returncode == 0, made.stderr
    subprocess.run(["bash", "-n"], input=made.stdout, text=True, check=True)  # it parses
    assert set(_complete(made.stdout, ["rlpipe", "co"])) == {"compare", "completion"}
    assert "--hub" in _complete(made.stdout, ["rlpipe", "plan", "--h"])
    assert set(_complete(made.stdout, ["rlpipe", "completion", ""])) == {"bash", "zsh"}


def test_zsh_gets_a_completion_function_naming_every_command() -> None:
    made = rlpipe("completion", "zsh")
    assert made.returncode == 0, made.stderr
    assert made.stdout.startswith("#compdef rlpipe")
    for command in ("submit", "watch", "logs", "compare", "retry", "promote", "completion"):
        assert f"{command}:" in made.stdout or f'"{command}' in made.stdout, command


def test_an_unknown_shell_is_a_usage_error() -> None:
    assert rlpipe("completion", "fish").returncode == 2


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash here")
def test_bash_completes_run_ids_from_rlpipe_list(buckets: Buckets) -> None:
    """The run ids offered are those `rlpipe list` shows for the deployment the shell points at."""
    from tests.cli.test_cli_contract import _record

    ledger = buckets.ledger()
    for run_id in ("rabcdefghijk", "rabzzzzzzzzz", "rqqqqqqqqqqq"):
        assert ledger.claim(_record(run_id, "training"))
    env = {k: v for k, v in os.environ.items() if k != "RLPIPE_LOCAL"}
    env.update(buckets.env(RLPIPE_TARGET="gcp"))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"  # the rlpipe of this install
    made = rlpipe("completion", "bash")
    for command in ("status", "watch", "logs", "retry"):
        assert set(_complete(made.stdout, ["rlpipe", command, "rab"], env)) == {
            "rabcdefghijk",
            "rabzzzzzzzzz",
        }
    assert _complete(made.stdout, ["rlpipe", "completion", "rab"], env) == [], "only arguments that name runs"
