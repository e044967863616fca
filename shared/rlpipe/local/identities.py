"""The identities the local stack plays (the workflow's and the operator's) and their issuer.

On Google Cloud, Workflows' ``auth: {type: OIDC}`` and the CLI attach Google-signed ID tokens, and
the stage function verifies them (control/adapters/callers.py). Locally the stack plays Google: it
makes an RSA key when it starts (its root, mode 0600), signs the played callers' tokens with it
(RS256, Google's claims), and publishes the public key as Google publishes its certificates, at
the control server's ``/oauth2/v1/certs`` (``RLPIPE_ID_TOKEN_CERTS_URL``). The function verifies
with production's code, so a token signed by another key, for another audience, or expired is
refused here too. The accounts mirror the deployment's (infra/terraform/main.tf ``sa_ids``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

from google.auth import crypt, jwt

from rlpipe.control.adapters.identities import WORKFLOW_IDENTITY_ENV

OPERATOR_IDENTITY_ENV = "RLPIPE_LOCAL_OPERATOR_IDENTITY"
TOKEN_SECONDS = 3600  # an ID token Google issues lives an hour
ISSUER = "https://accounts.google.com"


def workflow_account(project: str) -> str:
    """The local workflow's service account (the deployment's ``rlpipe-workflow``)."""
    return f"rlpipe-workflow@{project}.iam.gserviceaccount.com"


def operator_account(project: str) -> str:
    """The local operator's service account (the deployment's ``rlpipe-operator``)."""
    return f"rlpipe-operator@{project}.iam.gserviceaccount.com"


def played(project: str, key_path: Path, certs_url: str, stage_url: str) -> dict[str, str]:
    """The stack's settings: the workflow's identity (the engine calls as it), the operator's (the
    CLI's), the key both sign with, and where and for which audience the stage function verifies."""
    return {
        WORKFLOW_IDENTITY_ENV: workflow_account(project),
        OPERATOR_IDENTITY_ENV: operator_account(project),
        SIGNING_KEY_ENV: str(key_path),
        "RLPIPE_ID_TOKEN_CERTS_URL": certs_url,
        "RLPIPE_STAGE_AUDIENCE": stage_url,
    }


SIGNING_KEY_ENV = "RLPIPE_LOCAL_SIGNING_KEY"  # the PEM private key the played callers sign with
CERTS_PATH = "/oauth2/v1/certs"  # the path Google publishes its ID-token certificates at
KEY_FILE = "signing-key.pem"
CERTS_FILE = "certs.json"


def ensure_signing_key(folder: Path) -> Path:
    """The stack's signing key in ``folder`` (made once, mode 0600), its public key published
    beside it as Google's certs URL answers (``{key id: PEM}``; google-auth takes a PEM public key
    as it takes a certificate). Returns the key's path."""
    from cryptography.hazmat.primitives import serialization as pem
    from cryptography.hazmat.primitives.asymmetric import rsa

    key_path, certs_path = folder / KEY_FILE, folder / CERTS_FILE
    if not (key_path.exists() and certs_path.exists()):
        folder.mkdir(parents=True, exist_ok=True)
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        public = key.public_key().public_bytes(pem.Encoding.PEM, pem.PublicFormat.SubjectPublicKeyInfo)
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(key.private_bytes(pem.Encoding.PEM, pem.PrivateFormat.PKCS8, pem.NoEncryption()))
        certs_path.write_text(json.dumps({hashlib.sha256(public).hexdigest()[:40]: public.decode()}))
    return key_path


@functools.cache
def _process_key() -> Path:
    """The key of a process that plays callers outside a stack (a Workflows engine in a test)."""
    return ensure_signing_key(Path(tempfile.mkdtemp(prefix="rlpipe-issuer-")))


def published_certs(key_path: Path) -> bytes:
    """What the certs URL answers for the key at ``key_path``."""
    return (key_path.parent / CERTS_FILE).read_bytes()


@functools.lru_cache(maxsize=8)
def _signer(key_path: Path) -> crypt.RSASigner:
    """Loaded once per key: loading checks the RSA key, about 45 ms of CPU, and every call the local
    Workflows engine makes to the stage function carries a token."""
    key_id = next(iter(json.loads(published_certs(key_path))))
    signer: crypt.RSASigner = crypt.RSASigner.from_string(key_path.read_bytes(), key_id=key_id)
    return signer


def played_id_token(
    email: str, audience: str, *, now: float | None = None, key_path: Path | None = None
) -> str:
    """An ID token with the claims of Google's for a service account (``email``, ``aud``), signed
    with the stack's key (``key_path``, else ``RLPIPE_LOCAL_SIGNING_KEY``, else this process's own)."""
    named = os.environ.get(SIGNING_KEY_ENV, "").strip()
    path = key_path or (Path(named) if named else _process_key())
    issued = int(time.time() if now is None else now)
    claims: dict[str, object] = {"iss": ISSUER, "aud": audience, "azp": email, "sub": email, "email": email}
    claims |= {"email_verified": True, "iat": issued, "exp": issued + TOKEN_SECONDS}
    token: bytes = jwt.encode(_signer(path), claims)
    return token.decode("ascii")
