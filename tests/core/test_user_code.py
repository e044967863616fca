"""Static checks of a user's reward file, dataset processor and chat template (rlpipe.core.user_code).

Where a verdict rests on how MaxText 0.2.4 calls the code, the test also calls the fixture the same
way (``_call_like_maxtext``: every argument by keyword, ``train_rl.py:581-587`` and tunix
``reward_manager.py:148``), so an accepted file is shown to work and a refused one to fail. Only
the tests' own fixtures are ever run; the checker itself is shown never to run what it reads.
"""

from __future__ import annotations

import ast
import inspect
import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rlpipe.core import user_code
from rlpipe.core.problems import Problem
from rlpipe.core.user_code import (
    check_chat_template,
    check_processor_file,
    check_reward_file,
    check_size,
    decode_utf8,
)

FILE = "rewards.file"
NAMES = "rewards.functions"
PROCESSOR = "dataset.processor"
TEMPLATE = "chat_template"

GOOD_REWARDS = textwrap.dedent(
    '''
    """Two rewards written the way MaxText calls them."""
    import json
    import re

    ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


    def exact_match(prompts, completions, tmvp_config, **kwargs):
        """1.0 when the tagged answer is one of the acceptable answers."""
        scores = []
        for completion, acceptable in zip(completions, kwargs["answer"]):
            found = ANSWER.search(completion)
            scores.append(1.0 if found and found.group(1).strip() in json.loads(acceptable) else 0.0)
        return scores


    def length_penalty(prompts, completions, tmvp_config, *, limit=200, **kwargs):
        return [-0.01 * max(0, len(c) - limit) for c in completions]


    shortest = lambda prompts, completions, tmvp_config, **kwargs: [-len(c) for c in completions]
    '''
)


def _rewards(source: str, names: list[str], **kwargs: Any) -> list[Problem]:
    return check_reward_file(textwrap.dedent(source), names, file_field=FILE, names_field=NAMES, **kwargs)


def _load(source: str) -> dict[str, Any]:
    """Run a test fixture (never a user's file) to see what MaxText would get from it."""
    namespace: dict[str, Any] = {}
    exec(compile(textwrap.dedent(source), "<fixture>", "exec"), namespace)
    return namespace


def _call_like_maxtext(fn: Callable[..., Any]) -> Any:
    """train_rl.py:584-585 wraps ``fn`` in ``_reward_fn(**kwargs)`` calling ``fn(tmvp_config=..., **kwargs)``;
    tunix calls that with ``prompts=``, ``completions=`` and the example's other keys plus ``mode``."""
    config = SimpleNamespace(solution_start_token="<answer>", solution_end_token="</answer>")

    def _reward_fn(**kwargs: Any) -> Any:
        return fn(tmvp_config=config, **kwargs)

    return _reward_fn(
        prompts=["What is 2+2?", "What is 3+3?"],
        completions=["<answer>4</answer>", "<answer>5</answer>"],
        question=["What is 2+2?", "What is 3+3?"],
        answer=['["4", "4"]', '["6", "6"]'],
        mode="train",
    )


def _only(problems: list[Problem]) -> Problem:
    assert len(problems) == 1, problems
    assert problems[0].message and problems[0].fix
    return problems[0]


# --- reward files ---------------------------------------------------------------------------------


def test_real_reward_functions_pass_and_work_when_called_like_maxtext() -> None:
    assert _rewards(GOOD_REWARDS, ["exact_match", "length_penalty", "shortest"]) == []
    functions = _load(GOOD_REWARDS)
    assert _call_like_maxtext(functions["exact_match"]) == [1.0, 0.0]
    assert _call_like_maxtext(functions["length_penalty"]) == [0.0, 0.0]
    assert _call_like_maxtext(functions["shortest"]) == [-18, -18]


def test_names_in_the_file_that_are_not_listed_are_fine() -> None:
    assert _rewards(GOOD_REWARDS, ["length_penalty"]) == []


def test_a_syntax_error_names_its_line_and_column() -> None:
    source = "def exact_match(prompts, completions, tmvp_config, **kwargs):\n    return [\n\n"
    source += "def broken(:\n    pass\n"
    problem = _only(_rewards(source, ["exact_match"]))
    assert problem.path == FILE
    assert "not valid Python" in problem.message
    # Python itself places this error: the test asks the interpreter rather than trusting the checker.
    with pytest.raises(SyntaxError) as raised:
        ast.parse(source)
    assert f"line {raised.value.lineno}, column {raised.value.offset}" in problem.message


def test_a_syntax_error_on_a_later_line_reports_that_line() -> None:
    source = "def exact_match(prompts, completions, tmvp_config, **kwargs):\n    return []\n\nx = = 1\n"
    assert "line 4" in _only(_rewards(source, ["exact_match"])).message


def test_a_listed_name_the_file_does_not_define_is_reported_at_its_place_in_the_list() -> None:
    problem = _only(_rewards(GOOD_REWARDS, ["exact_match", "format_bonus"]))
    assert problem.path == "rewards.functions[1]"
    assert "'format_bonus'" in problem.message
    assert "def format_bonus" in problem.fix


def test_a_class_is_not_a_reward_function() -> None:
    source = """
    class exact_match:
        def __call__(self, prompts, completions, tmvp_config, **kwargs):
            return [0.0 for _ in completions]
    """
    problem = _only(_rewards(source, ["exact_match"]))
    assert problem.path == FILE
    assert "class" in problem.message and "line 2" in problem.message
    assert "def exact_match(prompts, completions, tmvp_config, **kwargs)" in problem.fix


def test_a_variable_is_not_a_reward_function() -> None:
    problem = _only(_rewards("WEIGHTS = {'exact': 1.0}\nscore = make_scorer(WEIGHTS)\n", ["score"]))
    assert problem.path == FILE
    assert "variable" in problem.message and "line 2" in problem.message


def test_another_name_for_a_function_says_to_list_the_function_itself() -> None:
    source = GOOD_REWARDS + "\nscore = exact_match\n"
    problem = _only(_rewards(source, ["score"]))
    assert problem.path == FILE
    assert "'exact_match'" in problem.message and "'exact_match'" in problem.fix


def test_the_last_top_level_binding_is_the_one_maxtext_would_get() -> None:
    redefined = GOOD_REWARDS + "\nexact_match = 3\n"
    assert "variable" in _only(_rewards(redefined, ["exact_match"])).message
    deleted = GOOD_REWARDS + "\ndel length_penalty\n"
    assert _only(_rewards(deleted, ["length_penalty"])).path == "rewards.functions[0]"
    rebound = "exact_match = None\n" + GOOD_REWARDS
    assert _rewards(rebound, ["exact_match"]) == []


def test_a_parameter_maxtext_never_passes_is_refused_and_really_fails() -> None:
    # The brief's "too few positional parameters": MaxText passes nothing by position, so what breaks
    # a function is a required parameter under a name it does not pass (here `config`).
    source = """
    def exact_match(prompts, completions, config, **kwargs):
        return [0.0 for _ in completions]
    """
    problem = _only(_rewards(source, ["exact_match"]))
    assert problem.path == FILE
    assert "config" in problem.message and "tmvp_config" in problem.message
    with pytest.raises(TypeError, match="config"):
        _call_like_maxtext(_load(source)["exact_match"])


def test_fewer_named_parameters_are_fine_because_every_argument_arrives_by_keyword() -> None:
    source = """
    def brevity(completions, **kwargs):
        return [1.0 / (1 + len(c)) for c in completions]

    def uses_answer(prompts, completions, answer, tmvp_config, mode, **kwargs):
        return [float(mode == "train") for _ in answer]
    """
    assert _rewards(source, ["brevity", "uses_answer"]) == []
    assert len(_call_like_maxtext(_load(source)["brevity"])) == 2
    assert _call_like_maxtext(_load(source)["uses_answer"]) == [1.0, 1.0]


def test_without_kwargs_it_is_refused_and_really_fails() -> None:
    source = """
    def exact_match(prompts, completions, tmvp_config):
        return [0.0 for _ in completions]
    """
    problem = _only(_rewards(source, ["exact_match"]))
    assert problem.path == FILE
    assert "**kwargs" in problem.message
    for passed in ("mode", "question", "answer"):
        assert passed in problem.message
    assert "**kwargs" in problem.fix
    with pytest.raises(TypeError, match="unexpected keyword"):
        _call_like_maxtext(_load(source)["exact_match"])


def test_a_lambda_is_checked_like_a_def() -> None:
    source = "short = lambda completions: [0.0 for _ in completions]\n"
    assert "**kwargs" in _only(_rewards(source, ["short"])).message


def test_positional_only_parameters_are_refused_and_really_fail() -> None:
    source = """
    def exact_match(prompts, completions, tmvp_config, /, **kwargs):
        return [0.0 for _ in completions]
    """
    problem = _only(_rewards(source, ["exact_match"]))
    assert problem.path == FILE and "positional-only" in problem.message
    with pytest.raises(TypeError):
        _call_like_maxtext(_load(source)["exact_match"])


def test_async_def_is_refused_because_maxtext_never_awaits_it() -> None:
    source = """
    async def exact_match(prompts, completions, tmvp_config, **kwargs):
        return [0.0 for _ in completions]
    """
    problem = _only(_rewards(source, ["exact_match"]))
    assert problem.path == FILE
    assert "async" in problem.message and "await" in problem.message
    result = _call_like_maxtext(_load(source)["exact_match"])
    assert inspect.iscoroutine(result)  # what Tunix would try to turn into numbers
    result.close()


def test_generators_decorators_and_conditional_definitions_cannot_be_checked() -> None:
    generator = "def g(prompts, completions, tmvp_config, **kwargs):\n    yield 1.0\n"
    assert "generator" in _only(_rewards(generator, ["g"])).message
    decorated = "import functools\n@functools.cache\ndef d(prompts, completions, tmvp_config, **kwargs):\n    return []\n"
    assert "decorator" in _only(_rewards(decorated, ["d"])).message
    conditional = (
        "try:\n    from mylib import c\nexcept ImportError:\n    def c(**kwargs):\n        return []\n"
    )
    assert "inside a block" in _only(_rewards(conditional, ["c"])).message
    imported = "from mylib import scorer as s\n"
    assert "imported" in _only(_rewards(imported, ["s"])).message
    nested_yield = "def n(prompts, completions, tmvp_config, **kwargs):\n    return list(x for x in [1.0])\n"
    assert _rewards(nested_yield, ["n"]) == []


def test_duplicate_and_malformed_names_are_reported_at_their_place_in_the_list() -> None:
    problems = _rewards(GOOD_REWARDS, ["exact_match", "length_penalty", "exact_match", "exact-match"])
    assert [p.path for p in problems] == ["rewards.functions[2]", "rewards.functions[3]"]
    assert "twice" in problems[0].message
    assert "'exact-match'" in problems[1].message


def test_an_empty_list_of_names_is_a_problem() -> None:
    problem = _only(_rewards(GOOD_REWARDS, []))
    assert problem.path == NAMES


def test_every_problem_is_reported_at_once() -> None:
    source = "def a(prompts, completions, tmvp_config):\n    return []\nclass b: pass\n"
    problems = _rewards(source, ["a", "b", "c", "a"])
    assert sorted(p.path for p in problems) == [FILE, FILE, "rewards.functions[2]", "rewards.functions[3]"]


def test_keys_of_a_users_own_processor_may_be_required_when_unknown() -> None:
    source = "def by_level(prompts, completions, tmvp_config, difficulty, **kwargs):\n    return []\n"
    assert "difficulty" in _only(_rewards(source, ["by_level"])).message
    assert _rewards(source, ["by_level"], dataset_keys=None) == []
    assert _rewards(source, ["by_level"], dataset_keys=("question", "answer", "difficulty")) == []


def test_a_utf8_byte_order_mark_is_accepted_as_python_accepts_it() -> None:
    assert _rewards("\ufeff" + GOOD_REWARDS, ["exact_match"]) == []


# --- never run --------------------------------------------------------------------------------------


def test_the_file_is_only_read_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    source = (
        "import os, pathlib\n"
        f"pathlib.Path({str(marker)!r}).write_text('imported')\n"
        f"os.system('touch {marker}.shell')\n"
        "def exact_match(prompts, completions, tmvp_config, **kwargs):\n"
        "    return [0.0 for _ in completions]\n"
        "def process_data(dataset_name, model_tokenizer, template_config, tmvp_config, x):\n"
        "    return x\n"
    )
    assert _rewards(source, ["exact_match"]) == []
    assert check_processor_file(source, file_field=PROCESSOR) == []
    assert not marker.exists() and not Path(f"{marker}.shell").exists()
    # The marker does work: running the file (in another process) leaves both behind.
    script = tmp_path / "rewards.py"
    script.write_text(source)
    subprocess.run([sys.executable, str(script)], check=True, timeout=60)
    assert marker.read_text() == "imported" and Path(f"{marker}.shell").exists()


def test_the_checker_has_no_way_to_run_code() -> None:
    tree = ast.parse(Path(user_code.__file__).read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not imported & {"importlib", "runpy", "subprocess", "os", "builtins", "pickle", "marshal"}
    called = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert not called & {"exec", "eval", "compile", "__import__", "getattr", "open"}


# --- text, size ---------------------------------------------------------------------------------------


def test_non_utf8_bytes_are_a_problem_that_names_the_byte() -> None:
    text, problems = decode_utf8("x = 'caf\u00e9'\n".encode("latin-1"), field=FILE)
    assert text is None
    problem = _only(problems)
    assert problem.path == FILE and "UTF-8" in problem.message and "e9" in problem.message
    assert decode_utf8("x = 'caf\u00e9'\n".encode(), field=FILE) == ("x = 'caf\u00e9'\n", [])


def test_a_file_over_256_kib_is_a_problem() -> None:
    limit = 256 * 1024
    assert check_size(b"#" * limit, field=FILE) == []
    problem = _only(check_size(b"#" * (limit + 1), field=FILE))
    assert problem.path == FILE and str(limit + 1) in problem.message and str(limit) in problem.message


# --- dataset processor ----------------------------------------------------------------------------------


def test_a_processor_with_five_parameters_passes() -> None:
    source = """
    def process_data(dataset_name, model_tokenizer, template_config, tmvp_config, x):
        question = str(x["problem"])
        return {"prompts": question, "question": question, "answer": str(x["solution"])}
    """
    assert check_processor_file(textwrap.dedent(source), file_field=PROCESSOR) == []
    splat = "def process_data(*args):\n    return {}\n"
    assert check_processor_file(splat, file_field=PROCESSOR) == []


def test_a_processor_with_four_parameters_is_refused_and_really_fails() -> None:
    source = "def process_data(dataset_name, template_config, tmvp_config, x):\n    return x\n"
    problem = _only(check_processor_file(source, file_field=PROCESSOR))
    assert problem.path == PROCESSOR
    assert "4" in problem.message and "5" in problem.message
    assert "dataset_name, model_tokenizer, template_config, tmvp_config, x" in problem.fix
    with pytest.raises(TypeError):  # train_rl.py:322 passes five positional arguments
        _load(source)["process_data"]("openai/gsm8k", object(), {}, object(), {})


def test_a_processor_that_requires_too_much_or_is_missing_is_refused() -> None:
    six = "def process_data(a, b, c, d, e, f):\n    return {}\n"
    assert "6" in _only(check_processor_file(six, file_field=PROCESSOR)).message
    keyword_only = "def process_data(a, b, c, d, e, *, strict):\n    return {}\n"
    assert "strict" in _only(check_processor_file(keyword_only, file_field=PROCESSOR)).message
    missing = _only(
        check_processor_file("def process(a, b, c, d, e):\n    return {}\n", file_field=PROCESSOR)
    )
    assert missing.path == PROCESSOR and "'process_data'" in missing.message
    asynchronous = "async def process_data(a, b, c, d, e):\n    return {}\n"
    assert "async" in _only(check_processor_file(asynchronous, file_field=PROCESSOR)).message
    broken = _only(check_processor_file("def process_data(\n", file_field=PROCESSOR))
    assert broken.path == PROCESSOR and "line 1" in broken.message


# --- chat template ------------------------------------------------------------------------------------------

SYSTEM = "Reason inside {reasoning_start_token}{reasoning_end_token}, answer inside {solution_start_token}{solution_end_token}."
GOOD_TEMPLATE = {
    "SYSTEM_PROMPT": SYSTEM,
    "TEMPLATE": "<|user|>\n{system_prompt}\n\n{question}\n<|assistant|>",
}


def _template(**changes: Any) -> str:
    document = {**GOOD_TEMPLATE, **changes}
    return json.dumps({k: v for k, v in document.items() if v is not None})


def _format_like_maxtext(document: dict[str, str]) -> str:
    """utils_rl.py:657-665, written out again here for the test."""
    tokens = {
        "reasoning_start_token": "<r>",
        "reasoning_end_token": "</r>",
        "solution_start_token": "<a>",
        "solution_end_token": "</a>",
    }
    return document["TEMPLATE"].format(
        system_prompt=document["SYSTEM_PROMPT"].format(**tokens), question="Q?"
    )


def test_a_good_template_passes_and_formats() -> None:
    text = _template(extra="ignored", TEMPLATE="{{literal}} {system_prompt} {question}")
    assert check_chat_template(text, field=TEMPLATE) == []
    assert _format_like_maxtext(json.loads(text)).startswith("{literal} Reason inside <r></r>")


def test_template_that_is_not_json_says_where() -> None:
    problem = _only(check_chat_template('{"SYSTEM_PROMPT": "x",\n "TEMPLATE": }', field=TEMPLATE))
    assert problem.path == TEMPLATE and "not JSON" in problem.message and "line 2" in problem.message
    listed = _only(check_chat_template('["SYSTEM_PROMPT"]', field=TEMPLATE))
    assert "list" in listed.message and "not an object" in listed.message


def test_template_missing_a_key_or_with_a_non_string() -> None:
    missing = _only(check_chat_template(_template(SYSTEM_PROMPT=None), field=TEMPLATE))
    assert missing.path == TEMPLATE and "'SYSTEM_PROMPT'" in missing.message
    number = _only(check_chat_template(_template(TEMPLATE=["{system_prompt}", "{question}"]), field=TEMPLATE))
    assert number.path == TEMPLATE and "'TEMPLATE'" in number.message and "list" in number.message


@pytest.mark.parametrize(
    ("changes", "raises"),
    [
        ({"TEMPLATE": "{system_prompt}\n{question}\nThe answer is {answer}"}, KeyError),
        ({"SYSTEM_PROMPT": "Think, then answer in {question}."}, KeyError),
        ({"TEMPLATE": "{system_prompt} {} {question}"}, IndexError),
    ],
)
def test_a_placeholder_maxtext_does_not_fill_is_refused_and_really_fails(
    changes: dict[str, str], raises: type[Exception]
) -> None:
    text = _template(**changes)
    problem = _only(check_chat_template(text, field=TEMPLATE))
    assert problem.path == TEMPLATE
    (key,) = changes
    assert repr(key) in problem.message
    with pytest.raises(raises):
        _format_like_maxtext(json.loads(text))


def test_the_unknown_placeholder_is_named() -> None:
    problem = _only(
        check_chat_template(_template(TEMPLATE="{system_prompt} {question} {answer}"), field=TEMPLATE)
    )
    assert "{answer}" in problem.message
    assert "{system_prompt}, {question}" in problem.fix


@pytest.mark.parametrize("bad", ["{system_prompt} {question", "{system_prompt} } {question}", "{question} {"])
def test_an_unbalanced_brace_is_refused_and_really_fails(bad: str) -> None:
    text = _template(TEMPLATE=bad)
    problem = _only(check_chat_template(text, field=TEMPLATE))
    assert problem.path == TEMPLATE and "brace" in problem.message and "{{" in problem.fix
    with pytest.raises(ValueError):
        _format_like_maxtext(json.loads(text))


def test_a_template_without_the_question_is_refused() -> None:
    problem = _only(check_chat_template(_template(TEMPLATE="{system_prompt} Solve it."), field=TEMPLATE))
    assert "{question}" in problem.message


def test_template_problems_in_both_strings_are_reported_together() -> None:
    text = _template(SYSTEM_PROMPT="{unknown}", TEMPLATE="{question} {answer}")
    problems = check_chat_template(text, field=TEMPLATE)
    assert len(problems) == 2 and {"{unknown}", "{answer}"} <= {
        w for p in problems for w in p.message.split()
    }
