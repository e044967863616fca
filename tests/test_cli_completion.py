"""`rlpipe completion bash|zsh` (issue 29): the scripts come from the parser itself (shtab), so what
bash offers is exactly what the CLI accepts. The bash script is sourced in a real bash and asked to
complete, as a user's Tab would."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.test_cli import rlpipe


def _complete(script: str, words: list[str]) -> list[str]:
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
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, check=True)
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
