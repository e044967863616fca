"""Loading ``retry`` policies and ``${name}`` references (a part of the loader).

Shapes from https://cloud.google.com/workflows/docs/reference/syntax/retrying: a policy is a
default (``${http.default_retry}`` …) or a map with exactly ``predicate``, ``max_retries`` and
``backoff`` (``initial_delay``, ``max_delay``, ``multiplier``); a predicate is a built-in or a
subworkflow taking one argument.
"""

from __future__ import annotations

from typing import Any

from .errors import LoadError
from .expressions import Attr, ExpressionSyntaxError, Var, parse_expression
from .model import Param, RetryPolicy
from .retry_policies import BUILTIN_PREDICATES, DEFAULT_BACKOFF, DEFAULT_MAX_RETRIES, DEFAULT_POLICIES
from .templates import LiteralT, Template, whole_expression
from .values import is_int, is_number


class RetryLoading:
    """Mixed into the subworkflow loader, which provides these three."""

    signatures: dict[str, list[Param]]

    def error(self, message: str, step: str | None = None) -> LoadError:
        raise NotImplementedError

    def compile(self, raw: Any, step: str) -> Template:
        raise NotImplementedError

    def retry_policy(self, raw: Any, name: str) -> RetryPolicy:
        if isinstance(raw, str):
            policy = self.dotted_reference(raw, name)
            if policy not in DEFAULT_POLICIES:
                raise self.error(f"unknown retry policy {raw!r}; use a map or ${{http.default_retry}}", name)
            initial, maximum, multiplier = DEFAULT_BACKOFF
            return RetryPolicy(
                DEFAULT_POLICIES[policy],
                True,
                LiteralT(DEFAULT_MAX_RETRIES),
                LiteralT(initial),
                LiteralT(maximum),
                LiteralT(multiplier),
            )
        if not isinstance(raw, dict):
            raise self.error("retry must be a map or a default policy", name)
        if set(raw) != {"predicate", "max_retries", "backoff"}:
            raise self.error("retry needs exactly predicate, max_retries and backoff", name)
        backoff = raw["backoff"]
        if not isinstance(backoff, dict) or set(backoff) != {"initial_delay", "max_delay", "multiplier"}:
            raise self.error("backoff needs exactly initial_delay, max_delay and multiplier", name)
        predicate = self.dotted_reference(raw["predicate"], name)
        if predicate in BUILTIN_PREDICATES:
            builtin = True
        elif predicate in self.signatures:
            builtin = False
            params = self.signatures[predicate]
            if not params or sum(not p.has_default for p in params) > 1:
                raise self.error(f"retry predicate {predicate!r} must take exactly one argument", name)
        else:
            raise self.error(
                f"retry predicate {predicate!r} is not a subworkflow or built-in predicate", name
            )
        templates = [self.compile(raw["max_retries"], name)] + [
            self.compile(backoff[key], name) for key in ("initial_delay", "max_delay", "multiplier")
        ]
        for key, template in zip(
            ("max_retries", "initial_delay", "max_delay", "multiplier"), templates, strict=True
        ):
            if isinstance(template, LiteralT):
                value = template.value
                ok = is_int(value) if key == "max_retries" else is_number(value)
                if not ok or value < 0:
                    raise self.error(f"retry {key} must be a non-negative number, got {value!r}", name)
        return RetryPolicy(predicate, builtin, *templates)

    def dotted_reference(self, raw: Any, step: str) -> str:
        """The name in ``${name}`` / ``${a.b}`` (predicates and policies are referenced, not called)."""
        inner = whole_expression(raw) if isinstance(raw, str) else None
        node = None
        if inner is not None:
            try:
                node = parse_expression(inner).root
            except ExpressionSyntaxError:
                node = None
        if isinstance(node, Var):
            return node.name
        if isinstance(node, Attr) and node.dotted_name():
            return str(node.dotted_name())
        raise self.error(f"expected a reference like ${{name}}, got {raw!r}", step)
