"""A JSON body read as the entry points read it: any document a parser cannot hold is one error.

Python's ``json`` raises ``ValueError`` for text that is not JSON, but ``RecursionError`` for
text nested deeper than it recurses (a few thousand brackets, far under any size cap), and no
web framework turns the second into a 400: a caller could have any entry point answer 500. Every
place that parses a request body calls :func:`loads`, so both come out as :class:`UnreadableJson`
with a sentence naming what is wrong."""

from __future__ import annotations

import json
from typing import Any


class UnreadableJson(ValueError):
    """The body is not a JSON document this service can read (the message says why)."""


class NestedTooDeeply(UnreadableJson):
    """JSON, perhaps, but deeper than the parser recurses: refused as the caller's mistake."""


def loads(data: bytes | str) -> Any:
    try:
        return json.loads(data)
    except RecursionError:
        raise NestedTooDeeply("the body is nested too deeply to read; send a flatter document") from None
    except ValueError as exc:
        raise UnreadableJson(f"the body is not JSON ({str(exc)[:120]})") from None
