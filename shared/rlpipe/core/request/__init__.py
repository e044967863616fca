"""The request document: schema, preset merging, and validation a person can act on.

A request is YAML or JSON. Only ``model`` and ``hf_repo`` are required; every other value comes
from the named preset (see ``presets.py``) unless the request overrides it. Parsing never raises
anything but ``RequestInvalid``, which lists *every* problem found, each with the field path and
the fix, so a user fixes a request in one round trip.

The package is layered so that nothing imports in a circle: ``model`` (the typed fields) ←
``checks`` (cross-field rules) ← ``validation`` (merge, scan, gather); ``documents`` turns bytes
into a mapping. This module re-exports what callers use.
"""

from rlpipe.core.request.documents import MAX_DOCUMENT_BYTES, parse_document
from rlpipe.core.request.model import (
    CONTROLLED_ARGS,
    TYPED_OVERRIDE_KEYS,
    Backoff,
    Budgets,
    CpuJobSpec,
    ExportSpec,
    GateSpec,
    PathwaysEnv,
    PathwaysSpec,
    PublishSpec,
    Request,
    RetrySpec,
    Scalar,
    ScratchSpec,
    SecretRef,
    Timeouts,
    TpuSpec,
    TrainingSpec,
)
from rlpipe.core.request.validation import json_schema, load_request, validate_request

__all__ = [
    "CONTROLLED_ARGS",
    "MAX_DOCUMENT_BYTES",
    "TYPED_OVERRIDE_KEYS",
    "Backoff",
    "Budgets",
    "CpuJobSpec",
    "ExportSpec",
    "GateSpec",
    "PathwaysEnv",
    "PathwaysSpec",
    "PublishSpec",
    "Request",
    "RetrySpec",
    "Scalar",
    "ScratchSpec",
    "SecretRef",
    "Timeouts",
    "TpuSpec",
    "TrainingSpec",
    "json_schema",
    "load_request",
    "parse_document",
    "validate_request",
]
