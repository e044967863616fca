"""The identities the local stack plays: the workflow's and the operator's, as signed ID tokens.

On Google Cloud, Workflows attaches a Google-signed ID token naming the workflow's service
account to an ``http.post`` with ``auth: {type: OIDC}``, the CLI one naming the operators'
service account (``RLPIPE_IMPERSONATE_SERVICE_ACCOUNT``), and the stage function verifies the
signature, audience and expiry (control/adapters/callers.py) besides Cloud Run. Locally there is
no Google to sign, so the stack plays the issuer: it makes an RSA key of its own when it starts
(:func:`ensure_signing_key`, kept in its root, readable by its user only), signs the tokens of
the callers it plays with it (RS256, Google's claims and header), and publishes the key's
certificate as Google publishes its own, ``{key id: PEM certificate}`` (the control server's
``/oauth2/v1/certs``). The stage function is told that URL (``RLPIPE_ID_TOKEN_CERTS_URL``) and
verifies with the same code as in production, so a token signed by another key, for another
audience, or expired is refused here too.

The names mirror the deployment's service accounts (infra/terraform/main.tf ``sa_ids``): the
stack's settings name the workflow's (``RLPIPE_WORKFLOW_IDENTITY``, read by the stage function)
and the operator's (``RLPIPE_LOCAL_OPERATOR_IDENTITY``, read by the CLI when the stack is up).
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
import time
from datetime import UTC, datetime, timedelta
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
    """The local operator's service account (the deployment's ``rlpipe-operator``, which the CLI
    impersonates on Google Cloud)."""
    return f"rlpipe-operator@{project}.iam.gserviceaccount.com"


def played(project: str, key_path: Path, certs_url: str, stage_url: str) -> dict[str, str]:
    """The stack's settings naming both: the stage function takes the workflow's operations from
    the first only (control/adapters/identities.py), the local Workflows engine calls as it, and
    the CLI calls as the second; both sign with ``key_path``, and the stage function verifies
    against ``certs_url`` for its own URL as the audience."""
    return {
        WORKFLOW_IDENTITY_ENV: workflow_account(project),
        OPERATOR_IDENTITY_ENV: operator_account(project),
        SIGNING_KEY_ENV: str(key_path),
        "RLPIPE_ID_TOKEN_CERTS_URL": certs_url,
        "RLPIPE_STAGE_AUDIENCE": stage_url,
    }


def local_operator() -> str | None:
    """The operator the CLI plays against the local stack; None when the stack names none."""
    return os.environ.get(OPERATOR_IDENTITY_ENV, "").strip() or None


SIGNING_KEY_ENV = "RLPIPE_LOCAL_SIGNING_KEY"  # the PEM private key the played callers sign with
CERTS_PATH = "/oauth2/v1/certs"  # the path Google publishes its ID-token certificates at
KEY_FILE = "signing-key.pem"
CERTS_FILE = "certs.json"


def ensure_signing_key(folder: Path) -> Path:
    """The stack's signing key in ``folder`` (made once, mode 0600) with its published
    certificate beside it (``certs.json``: ``{key id: PEM}``, what Google's certs URL answers).
    Returns the key's path."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    key_path, certs_path = folder / KEY_FILE, folder / CERTS_FILE
    if key_path.exists() and certs_path.exists():
        return key_path
    folder.mkdir(parents=True, exist_ok=True)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "rlpipe local stack ID tokens")])
    start = datetime.now(UTC) - timedelta(minutes=5)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + timedelta(days=30))
        .sign(key, hashes.SHA256())
    )
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    key_id = cert.fingerprint(hashes.SHA256()).hex()[:40]
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(pem)
    certs_path.write_text(json.dumps({key_id: cert.public_bytes(serialization.Encoding.PEM).decode()}))
    return key_path


@functools.cache
def _process_key() -> Path:
    """A key for a process that plays callers outside a stack (a Workflows engine in a test): its
    tokens are signed all the same, and verify against this key's certificate only."""
    return ensure_signing_key(Path(tempfile.mkdtemp(prefix="rlpipe-issuer-")))


def published_certs(key_path: Path) -> bytes:
    """What the certs URL answers for the key at ``key_path``."""
    return (key_path.parent / CERTS_FILE).read_bytes()


def _signer(key_path: Path) -> crypt.RSASigner:
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
    claims = {
        "iss": ISSUER,
        "aud": audience,
        "azp": email,
        "sub": email,
        "email": email,
        "email_verified": True,
        "iat": issued,
        "exp": issued + TOKEN_SECONDS,
    }
    token: bytes = jwt.encode(_signer(path), claims)
    return token.decode("ascii")
