"""The function registry: names, parameters, and whether a function may appear in an expression.

Every function the engine knows is declared here with its parameter names, so
the loader can reject an unknown function or a wrong argument count *before*
anything runs, and a ``call:`` step can pass arguments by name.  Functions that
block (``http.*``, ``sys.sleep``, ``sys.log``, ``events.*``) may only be used in
``call:`` steps, as the standard library overview says
(https://cloud.google.com/workflows/docs/reference/stdlib/overview).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import TYPE_ERROR, raise_error
from .services import ExecutionServices

Impl = Callable[[ExecutionServices, list[Any]], Any]


@dataclass(frozen=True)
class FunctionSpec:
    name: str
    params: tuple[str, ...]
    required: int
    impl: Impl
    blocking: bool = False

    def check_arity(self, count: int) -> str | None:
        """An error message if ``count`` positional arguments do not fit, else ``None``."""
        if count < self.required or count > len(self.params):
            expected = (
                str(self.required)
                if self.required == len(self.params)
                else f"{self.required} to {len(self.params)}"
            )
            return f"{self.name}() takes {expected} arguments, got {count}"
        return None

    def bind_named(self, args: dict[str, Any]) -> list[Any]:
        """Order named ``call:`` arguments by parameter; missing optional ones are left off."""
        unknown = set(args) - set(self.params)
        if unknown:
            raise raise_error(TYPE_ERROR, f"{self.name}: unexpected arguments {sorted(unknown)}")
        positional: list[Any] = []
        for index, param in enumerate(self.params):
            if param in args:
                while len(positional) < index:
                    positional.append(None)
                positional.append(args[param])
            elif index < self.required:
                raise raise_error(TYPE_ERROR, f"{self.name}: missing argument {param!r}")
        return positional


class Registry:
    """A name -> ``FunctionSpec`` table with a decorator to fill it."""

    def __init__(self) -> None:
        self._specs: dict[str, FunctionSpec] = {}

    def register(
        self, name: str, params: str = "", *, optional: int = 0, blocking: bool = False
    ) -> Callable[[Impl], Impl]:
        names = tuple(p for p in params.split() if p)

        def decorate(impl: Impl) -> Impl:
            if name in self._specs:
                raise ValueError(f"function {name} registered twice")
            self._specs[name] = FunctionSpec(name, names, len(names) - optional, impl, blocking)
            return impl

        return decorate

    def get(self, name: str) -> FunctionSpec | None:
        return self._specs.get(name)

    def names(self) -> list[str]:
        return sorted(self._specs)


REGISTRY = Registry()

# Every function of the Workflows standard library and expression helpers, implemented here or not
# (https://cloud.google.com/workflows/docs/reference/stdlib/overview, its module pages, and
# https://cloud.google.com/workflows/docs/reference/stdlib/expression-helpers). A name listed here
# that REGISTRY lacks is real but "not supported by this engine"; any other name is "unknown".
STANDARD_LIBRARY = frozenset(
    {
        *("bool", "default", "double", "get_type", "if", "int", "keys", "len", "string", "type"),
        *("base64.decode", "base64.encode"),
        *("events.await_callback", "events.create_callback_endpoint"),
        *("experimental.executions.map", "experimental.executions.run"),
        *("hash.compute_checksum", "hash.compute_hmac"),
        *("http.delete", "http.get", "http.patch", "http.post", "http.put", "http.request"),
        *("json.decode", "json.encode", "json.encode_to_string"),
        *("list.concat", "list.prepend"),
        *("map.delete", "map.get", "map.merge", "map.merge_nested"),
        *("math.abs", "math.floor", "math.max", "math.min"),
        *("sys.get_env", "sys.log", "sys.now", "sys.sleep", "sys.sleep_until"),
        *("text.decode", "text.encode", "text.find_all", "text.find_all_regex", "text.match_regex"),
        *("text.replace_all", "text.replace_all_regex", "text.split", "text.substring"),
        *("text.to_lower", "text.to_upper", "text.url_decode", "text.url_encode", "text.url_encode_plus"),
        *("time.format", "time.parse"),
        "uuid.generate",
    }
)
CONNECTOR_PREFIX = "googleapis."  # connectors: real calls to Google APIs, none implemented here


def missing_function(name: str) -> str:
    """Why ``name`` cannot be called: a real function this engine lacks, or no such function."""
    if name in STANDARD_LIBRARY or name.startswith(CONNECTOR_PREFIX):
        return f"{name} is a Workflows standard-library function that this engine does not support"
    return f"unknown function {name!r}"
