"""Static checks of a user's reward file, dataset processor and chat template: read, never run.

A request may bring its own reward functions (``rewards.file`` + ``rewards.functions``), its own
``process_data`` (``dataset.processor``) and its own chat template (``chat_template``). MaxText
0.2.4 finds out they are broken only on the TPU, minutes into a run that already holds chips, so
intake and ``plan`` refuse them first with these checks.

Trust model: the control plane never runs a user's code. Python files are only parsed with
:mod:`ast` (no import, ``exec``, ``eval`` or ``importlib`` here); the template is only parsed as
JSON and with :meth:`string.Formatter.parse`. The code runs where MaxText runs it, in the run's own
pod. A static check cannot see what a name becomes at run time, so it accepts only what it can
read: a plain top-level ``def`` (or a ``lambda`` assigned to the name), and it refuses anything
else with a way to write it that it can check. Files are parsed with the grammar of the Python
running the check (3.11); MaxText's (>= 3.12, ``maxtext-0.2.4.dist-info/METADATA:20``) accepts all
of it, and a file using syntax new in 3.12 is refused.

What MaxText 0.2.4 does with them (paths under the wheel's ``maxtext/``):

- ``trainers/post_train/rl/utils_rl.py:887-905`` ``load_custom_callable`` executes the whole file
  as a fresh module (``:901``) and takes the attribute by name (``:902``).
- ``trainers/post_train/rl/train_rl.py:413-419``: ``reward_functions`` is split on commas and each
  stripped name is loaded from ``reward_functions_path``; together they REPLACE the built-in three.
  Every function is wrapped by ``make_reward_fn`` (``train_rl.py:581-587``), whose wrapper takes
  keywords only and calls ``fn(tmvp_config=trainer_config, **kwargs)`` (``:585``). Tunix
  (google-tunix 0.1.7, the least MaxText allows, ``METADATA:769``; paths in its wheel) calls it as
  ``reward_fn(prompts=..., completions=..., **call_kwargs)`` (``tunix/rl/reward_manager.py:148``),
  where the keywords are ``mode`` (``tunix/rl/rl_learner.py:191-193``) and every key of the
  processed example except ``prompts`` (``tunix/rl/grpo/grpo_learner.py:310-315``): ``question``
  and ``answer`` with MaxText's own processor (``utils_rl.py:771-778``). So EVERY argument arrives
  by keyword: a reward function needs ``**kwargs`` and no positional-only parameter, and its
  required parameters must be among the names passed (Tunix also fills a parameter named after
  one of its algorithm settings, ``reward_manager.py:132-146``; this check asks for a default
  there instead). ``rl.yml:201`` documents
  ``fn(prompts, completions, tmvp_config, **kwargs) -> list[float]``, as the built-ins are written
  (``utils_rl.py:203,219,434-436``). The call is synchronous and the result is turned into numbers
  at once (``reward_manager.py:148,162``), so an ``async def`` or a generator cannot work.
- ``train_rl.py:297-302`` loads ``process_data`` from ``dataset_processor_path`` and calls it with
  five positional arguments ``(dataset_name, model_tokenizer, template_config, trainer_config, x)``
  (``train_rl.py:322,329,344,357``); it returns a dict of ``prompts``, ``question``, ``answer``
  (``rl.yml:238-242``), which this check cannot see statically.
- ``input_pipeline/instruction_data_processing.py:37-42`` reads the template as JSON and returns
  None on bad JSON, which ``train_rl.py:287-291`` turns into "Data template is required".
  ``utils_rl.py:648-667`` formats ``TEMPLATE`` with ``system_prompt=`` and ``question=`` and
  ``SYSTEM_PROMPT`` with the four reasoning/solution tokens: any other placeholder is a KeyError
  there, an unbalanced brace a ValueError.

Problem paths: what is wrong with a listed name itself (not an identifier, listed twice, not in
the file) is reported at ``<names_field>[i]``; what is wrong inside a file at its file field.
"""

from __future__ import annotations

import ast
import json
import keyword
import string
import warnings
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass

from rlpipe.core.problems import Problem

MAX_USER_FILE_BYTES = 256 * 1024
"""The most bytes a user's file may have. These are small text files (a few functions, a JSON
template); a request may carry its copy inline, and a request must stay well under Pub/Sub's 10 MB
message limit and stay small in the ledger that keeps it (``request/inputs.py`` bounds ``inline``
the same)."""

REWARD_KEYWORDS = ("prompts", "completions", "tmvp_config", "mode")
"""Keywords every reward function receives (``train_rl.py:585``, ``reward_manager.py:148``,
``rl_learner.py:193``)."""

BUILTIN_DATASET_KEYS = ("question", "answer")
"""The processed example's keys, other than ``prompts``, that reach reward functions when MaxText's
own ``process_data`` is used (``utils_rl.py:771-778``)."""

PROCESS_DATA_ARGS = ("dataset_name", "model_tokenizer", "template_config", "tmvp_config", "x")
"""The five positional arguments of ``process_data`` (``rl.yml:239-240``, ``train_rl.py:322``)."""

TEMPLATE_PLACEHOLDERS = {
    "TEMPLATE": ("system_prompt", "question"),
    "SYSTEM_PROMPT": (
        "reasoning_start_token",
        "reasoning_end_token",
        "solution_start_token",
        "solution_end_token",
    ),
}
"""The keywords each template string is formatted with (``utils_rl.py:657-665``)."""

_REWARD_SHAPE = "def {name}(prompts, completions, tmvp_config, **kwargs)"
_PROCESSOR_SHAPE = "def process_data(" + ", ".join(PROCESS_DATA_ARGS) + ")"
_REWARD_CALL = "train_rl.py:585, tunix reward_manager.py:148"
_PROCESSOR_CALL = "train_rl.py:322"
_TEMPLATE_SHAPE = 'write a JSON object: {"SYSTEM_PROMPT": "...", "TEMPLATE": "...{question}..."}'
_LITERAL_BRACE = "write a literal brace doubled: {{ or }}"
_COMPOUND: tuple[type[ast.stmt], ...] = (ast.If, ast.Try, ast.TryStar, ast.For, ast.AsyncFor)
_COMPOUND += (ast.While, ast.With, ast.AsyncWith, ast.Match)
_SCOPES: tuple[type[ast.AST], ...] = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_SCOPES += (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def check_size(data: bytes, *, field: str) -> list[Problem]:
    """A user's file is at most :data:`MAX_USER_FILE_BYTES`."""
    if len(data) <= MAX_USER_FILE_BYTES:
        return []
    message = f"the file is {len(data)} bytes; a user file may have at most {MAX_USER_FILE_BYTES} (256 KiB)"
    return [
        Problem(field, message, "keep only code (or the template) in it; large data belongs in the dataset")
    ]


def decode_utf8(data: bytes, *, field: str) -> tuple[str | None, list[Problem]]:
    """The file's text, or None and a problem when the bytes are not UTF-8."""
    try:
        return data.decode("utf-8"), []
    except UnicodeDecodeError as error:
        bad = data[error.start : error.end].hex(" ")
        message = f"the file is not UTF-8 text: byte(s) {bad} at offset {error.start} ({error.reason})"
        return None, [Problem(field, message, "save the file as UTF-8 (MaxText reads it as UTF-8)")]


def check_reward_file(
    source: str,
    names: Sequence[str],
    *,
    file_field: str,
    names_field: str,
    dataset_keys: Collection[str] | None = BUILTIN_DATASET_KEYS,
) -> list[Problem]:
    """Every problem with a reward file and the function names taken from it.

    ``dataset_keys``: the keys besides ``prompts`` the dataset processor returns, which also reach
    each function by keyword; None when unknown (a user's own processor): then a required parameter
    outside :data:`REWARD_KEYWORDS` is not refused."""
    problems: list[Problem] = []
    if not names:
        message = "no reward function is named; MaxText needs at least one (train_rl.py:415-417)"
        problems.append(Problem(names_field, message, "list the functions' names, e.g. [exact_match]"))
    wanted: dict[str, int] = {}
    for index, name in enumerate(names):
        path = f"{names_field}[{index}]"
        if not name.isidentifier() or keyword.iskeyword(name):
            fix = "write the name exactly as after 'def' in the file (letters, digits, _)"
            problems.append(Problem(path, f"{name!r} is not a Python function name", fix))
        elif name in wanted:
            message = f"{name!r} is listed twice (also [{wanted[name]}]): MaxText would add its reward twice"
            problems.append(Problem(path, message, f"list {name!r} once"))
        else:
            wanted[name] = index
    tree, parse_problems = _parse(source, file_field)
    problems += parse_problems
    if tree is None:
        return problems
    bindings = _top_level_bindings(tree)
    passed = None if dataset_keys is None else {*REWARD_KEYWORDS, *dataset_keys}
    for name, index in wanted.items():
        binding = bindings.get(name)
        if binding is None:
            problems.append(_undefined(name, f"{names_field}[{index}]", "reward function"))
            continue
        shape = _REWARD_SHAPE.format(name=name)
        args, where, binding_problems = _callable(binding, name, file_field, shape, _REWARD_CALL)
        problems += binding_problems
        if args is not None:
            problems += _reward_signature(args, f"{name!r} ({where})", shape, file_field, passed)
    return problems


def check_processor_file(source: str, *, file_field: str) -> list[Problem]:
    """Every problem with a dataset processor file: a top-level ``process_data`` MaxText can call
    with its five positional arguments."""
    tree, problems = _parse(source, file_field)
    if tree is None:
        return problems
    binding = _top_level_bindings(tree).get("process_data")
    if binding is None:
        return [*problems, _undefined("process_data", file_field, "dataset processor")]
    shape, call = _PROCESSOR_SHAPE, _PROCESSOR_CALL
    args, where, binding_problems = _callable(binding, "process_data", file_field, shape, call)
    problems += binding_problems
    if args is None:
        return problems
    positional = [*args.posonlyargs, *args.args]
    required = len(positional) - len(args.defaults)
    takes, count = ", ".join(a.arg for a in positional) or "none", len(PROCESS_DATA_ARGS)
    subject = f"process_data ({where}) takes {len(positional)} positional parameter(s) ({takes})"
    if len(positional) < count and args.vararg is None:
        message = (
            f"{subject}; MaxText calls it with {count}: process_data({', '.join(PROCESS_DATA_ARGS)}) ({call})"
        )
        problems.append(Problem(file_field, message, f"write it as {shape}"))
    elif required > count:
        message = f"{subject}, {required} of them required; MaxText passes only {count} ({call})"
        problems.append(Problem(file_field, message, f"write it as {shape}, or give the rest defaults"))
    missing = [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is None]
    if missing:
        message = f"process_data ({where}) requires keyword-only {', '.join(missing)}; MaxText passes no keywords ({call})"
        problems.append(Problem(file_field, message, "give them defaults or remove them"))
    return problems


def check_chat_template(text: str, *, field: str) -> list[Problem]:
    """Every problem with a chat template: a JSON object whose ``SYSTEM_PROMPT`` and ``TEMPLATE``
    are strings MaxText can format (``utils_rl.py:657-665``). Other keys are ignored, as MaxText does."""
    try:
        document = json.loads(text)
    except RecursionError:
        return [Problem(field, "the chat template nests too deeply to read", _TEMPLATE_SHAPE)]
    except json.JSONDecodeError as error:
        message = (
            f"the chat template is not JSON: {error.msg} at line {error.lineno}, column {error.colno}; "
            "MaxText would stop with 'Data template is required' (instruction_data_processing.py:39-42, "
            "train_rl.py:288-291)"
        )
        return [Problem(field, message, _TEMPLATE_SHAPE)]
    if not isinstance(document, dict):
        message = f"the chat template is a JSON {type(document).__name__}, not an object"
        return [Problem(field, message, _TEMPLATE_SHAPE)]
    problems: list[Problem] = []
    for key, allowed in TEMPLATE_PLACEHOLDERS.items():
        if key not in document:
            message = f"the chat template has no {key!r} key; MaxText reads it (utils_rl.py:657-658)"
            problems.append(Problem(field, message, f'add "{key}": a string that may use {_braced(allowed)}'))
        elif not isinstance(document[key], str):
            message = f"the chat template's {key!r} is a JSON {type(document[key]).__name__}, not a string"
            problems.append(Problem(field, message, f"make {key!r} one string (join lines with \\n)"))
        else:
            problems += _placeholder_problems(document[key], key, allowed, field)
    return problems


def _placeholder_problems(text: str, key: str, allowed: tuple[str, ...], field: str) -> list[Problem]:
    """A template string formats with exactly ``allowed`` keywords: no other name, no positional
    ``{}``, no unbalanced brace. Only a bare ``{name}`` is accepted (no ``!r``, ``:spec``, ``.``, ``[]``)."""
    subject = f"the chat template's {key!r}"
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as error:
        message = f"{subject} has a brace str.format rejects ({error}; near character {_lone_brace(text)})"
        return [Problem(field, message, _LITERAL_BRACE)]
    problems: list[Problem] = []
    used: set[str] = set()
    for _text, name, spec, conversion in parsed:
        if name is None:
            continue
        shown = "{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
        base = name.split(".")[0].split("[")[0]
        if name in allowed and not spec and not conversion:
            used.add(name)
        elif base in allowed:
            message = f"{subject} uses {shown}; only a bare placeholder is checked"
            problems.append(Problem(field, message, f"write {{{base}}}"))
        else:
            what = "a positional placeholder" if base == "" or base.isdigit() else "a placeholder"
            message = (
                f"{subject} uses {what} {shown} that MaxText does not fill: it formats {key!r} with "
                f"only {_braced(allowed)} (utils_rl.py:657-665), so the first example would raise"
            )
            problems.append(Problem(field, message, f"use only {_braced(allowed)}; {_LITERAL_BRACE}"))
    if key == "TEMPLATE" and "question" not in used and not problems:
        message = f"{subject} has no {{question}}: every prompt would leave out the example's question"
        problems.append(Problem(field, message, "put {question} where the question goes"))
    return problems


def _lone_brace(text: str) -> int:
    """The offset of the first brace that makes ``text`` unformattable (approximate inside specs)."""
    at = 0
    while at < len(text):
        if text[at : at + 2] in ("{{", "}}"):
            at += 2
        elif text[at] == "}":
            return at
        elif text[at] == "{":
            close = text.find("}", at)
            if close < 0 or "{" in text[at + 1 : close]:
                return at
            at = close + 1
        else:
            at += 1
    return len(text)


def _braced(names: Sequence[str]) -> str:
    return ", ".join("{" + n + "}" for n in names)


def _parse(source: str, field: str) -> tuple[ast.Module | None, list[Problem]]:
    """The module's syntax tree (never compiled to code, never run), or a problem."""
    text = source.removeprefix("\ufeff")  # a UTF-8 BOM, which Python's import accepts
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. an invalid escape: a warning, not a failure
            return ast.parse(text, filename="<user file>"), []
    except SyntaxError as error:
        where = f"line {error.lineno}, column {error.offset}" if error.lineno else "an unknown place"
        message = f"the file is not valid Python: {error.msg} at {where}"
        fix = "fix the syntax there; `python -m py_compile FILE` shows the same error"
        return None, [Problem(field, message, fix)]
    except (ValueError, RecursionError, MemoryError) as error:
        message = f"the file is not valid Python: {type(error).__name__}: {error}"
        return None, [Problem(field, message, "remove NUL bytes and very deeply nested expressions")]


@dataclass(frozen=True)
class _Binding:
    """What a module's top level last binds a name to, as far as a reader can see."""

    node: ast.stmt
    value: ast.expr | None = None  # the assigned expression of a simple ``name = value``
    conditional: bool = False  # bound inside an if/try/for/with/while/match block


def _top_level_bindings(tree: ast.Module) -> dict[str, _Binding]:
    """The last binding of each name at module level, in file order; ``del`` unbinds."""
    bindings: dict[str, _Binding] = {}
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bindings[stmt.name] = _Binding(stmt)
        elif isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                simple = stmt.value if isinstance(target, ast.Name) else None
                bindings.update((name, _Binding(stmt, simple)) for name in _names(target, ast.Store))
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            bindings.update((name, _Binding(stmt, stmt.value)) for name in _names(stmt.target, ast.Store))
        elif isinstance(stmt, (ast.AugAssign, ast.Import, ast.ImportFrom)):
            bindings.update((name, _Binding(stmt)) for name in _bound_by(stmt))
        elif isinstance(stmt, ast.Delete):
            for name in (n for target in stmt.targets for n in _names(target, ast.Del)):
                bindings.pop(name, None)
        elif isinstance(stmt, _COMPOUND):
            bindings.update((name, _Binding(stmt, conditional=True)) for name in _bound_by(stmt))
    return bindings


def _names(target: ast.AST, context: type[ast.expr_context]) -> Iterator[str]:
    return (n.id for n in ast.walk(target) if isinstance(n, ast.Name) and isinstance(n.ctx, context))


def _bound_by(node: ast.AST) -> Iterator[str]:
    """Every name a statement may bind in its own scope (nested scopes' bodies left out)."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield from (a.asname or a.name.split(".")[0] for a in node.names if a.name != "*")
        return
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        yield node.name
    if isinstance(node, _SCOPES):
        return
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
        yield node.id
    elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
        yield node.name
    elif isinstance(node, ast.MatchMapping) and node.rest:
        yield node.rest
    for child in ast.iter_child_nodes(node):
        yield from _bound_by(child)


def _callable(
    binding: _Binding, name: str, field: str, shape: str, call_site: str
) -> tuple[ast.arguments | None, str, list[Problem]]:
    """The parameters of the plain function a name is bound to and where, or why we cannot tell.

    ``shape``: how to write it instead; ``call_site``: where MaxText calls it, for the messages."""
    node = binding.node
    where = f"line {node.lineno}"
    plain = f"define it at the top level as {shape}"

    def refuse(message: str, fix: str = plain) -> tuple[None, str, list[Problem]]:
        return None, where, [Problem(field, f"{name!r} ({where}) {message}", fix)]

    if binding.conditional:
        return refuse(
            "is bound inside a block (if/try/for/with/...); this check reads only plain definitions"
        )
    if isinstance(node, ast.AsyncFunctionDef):
        message = f"is an async def; MaxText calls it without await ({call_site}) and would get a coroutine"
        return refuse(message, f"make it a plain function: {shape}")
    if isinstance(node, ast.ClassDef):
        return refuse("is a class, not a function; calling it would build an object")
    if isinstance(node, ast.FunctionDef):
        if node.decorator_list:
            message = "has a decorator, which may replace it with anything; this check reads only plain defs"
            return refuse(message, "remove the decorator, or call the decorated function from a plain def")
        if any(_yields(stmt) for stmt in node.body):
            message = "is a generator (it uses yield); MaxText needs its return value"
            return refuse(message, "return the result instead of yielding it")
        return node.args, where, []
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        message = "is imported from another module; this check reads only this file"
        return refuse(message, f"define {shape} here, calling the imported function")
    if isinstance(binding.value, ast.Lambda):
        return binding.value.args, where, []
    if isinstance(binding.value, ast.Name):
        message = f"is another name for {binding.value.id!r}; this check reads only def and lambda"
        return refuse(message, f"list {binding.value.id!r} itself, or {plain}")
    return refuse("is a variable whose value this check cannot see; it reads only def and lambda")


def _yields(node: ast.AST) -> bool:
    if isinstance(node, (ast.Yield, ast.YieldFrom)):
        return True
    return not isinstance(node, _SCOPES) and any(_yields(child) for child in ast.iter_child_nodes(node))


def _reward_signature(
    args: ast.arguments, subject: str, shape: str, field: str, passed: set[str] | None
) -> list[Problem]:
    """A reward function takes ``prompts=``, ``completions=``, ``tmvp_config=`` and the rest by keyword."""
    problems: list[Problem] = []
    if args.posonlyargs:
        message = (
            f"{subject} has positional-only parameter(s) {', '.join(a.arg for a in args.posonlyargs)}; "
            f"MaxText passes every argument by keyword ({_REWARD_CALL})"
        )
        problems.append(Problem(field, message, f"remove the '/': {shape}"))
    if args.kwarg is None:
        extra = sorted((passed or set(REWARD_KEYWORDS)) - set(REWARD_KEYWORDS[:3]))
        message = (
            f"{subject} has no **kwargs; besides prompts, completions and tmvp_config MaxText passes "
            f"{', '.join(extra)} and every other key the dataset processor returns, by keyword "
            "(train_rl.py:585, tunix grpo_learner.py:310-315): it would raise TypeError"
        )
        problems.append(Problem(field, message, f"add **kwargs: {shape}"))
    if passed is not None:
        positional = [*args.posonlyargs, *args.args]
        required = positional[len(args.posonlyargs) : len(positional) - len(args.defaults)]
        required += [a for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is None]
        unknown = [a.arg for a in required if a.arg not in passed]
        if unknown:
            message = (
                f"{subject} requires parameter(s) {', '.join(unknown)} that MaxText never passes; "
                f"it passes only {', '.join(sorted(passed))}, by keyword"
            )
            problems.append(Problem(field, message, f"rename them to those, or give them defaults: {shape}"))
    return problems


def _undefined(name: str, path: str, role: str) -> Problem:
    message = (
        f"the file defines no top-level {name!r}; MaxText would fail loading the {role} (utils_rl.py:902-904)"
    )
    return Problem(
        path, message, f"define it at the top level of the file with def {name}(...), or fix the name"
    )
