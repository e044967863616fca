"""Tokens never leave the process: masked in log lines and in every object the pipeline writes.

Why one pattern in one place: the request checks refuse what looks like a token, but a token can
still arrive where no check looks (a map key, a `!!binary` value decoded to text, an unknown field
echoed into an error record). Masking at the two exits, the log line and the stored object, does
not depend on knowing every way in.
"""

from __future__ import annotations

import re
from typing import Any

# Hugging Face tokens (any case of the prefix, and no word boundary required: `hf_..._prod` is
# still a token), Google OAuth access tokens, and bearer credentials.
TOKEN = re.compile(r"(?i:hf_)[A-Za-z0-9]{20,}|ya29\.[A-Za-z0-9._-]{20,}|(?i:bearer\s+)[A-Za-z0-9._-]{16,}")
REDACTED = "[REDACTED]"


def mask_tokens(value: Any) -> Any:
    """``value`` with every token-like text masked, in keys and values, at any depth."""
    if isinstance(value, str):
        return TOKEN.sub(REDACTED, value)
    if isinstance(value, bytes):
        return mask_tokens(value.decode("utf-8", "replace"))
    if isinstance(value, dict):
        return {
            mask_tokens(k) if isinstance(k, (str, bytes)) else k: mask_tokens(v) for k, v in value.items()
        }
    if isinstance(value, (list, tuple, set, frozenset)):
        return [mask_tokens(v) for v in value]
    return value
