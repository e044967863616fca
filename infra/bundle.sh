#!/usr/bin/env bash
# Build the Cloud Functions source archive that Terraform uploads (infra/terraform/storage.tf).
#
#   infra/bundle.sh [OUTPUT]        default OUTPUT: build/functions-source.zip
#
# Layout of the archive (what the Python runtime of Cloud Run functions expects at its root):
#   main.py, ...          every file of functions/ (the entry points)
#   rlpipe/...            the production part of the library, from shared/rlpipe/ (imported as `rlpipe`)
#   requirements.txt      the runtime dependencies (the repository's requirements.txt)
#
# What goes in: an allowlist of packages, not a list of what to leave out. The archive holds
# rlpipe/__init__.py and the packages named in SHIPPED_PACKAGES below: the ones the deployed
# functions import (the core, the cluster client, the control plane, upstream, reconcile, and the
# publisher and report the stage function renders). Why an allowlist: the library also holds the
# local stand-ins (rlpipe/local, some 19,000 lines) and the CLI (rlpipe/cli, about 5,600), and a new
# package should reach production only when someone decides it does, never because it was
# forgotten in an exclusion. To make that decision unmissable, every package of shared/rlpipe/
# must be named either in SHIPPED_PACKAGES or in NOT_SHIPPED (with the reason); any other stops
# the build, naming it.
#
# A shipped package ships whole: code that only the local stack and the tests use lives in
# rlpipe/local (the API double's offline validator among it), never inside a shipped package. So the
# archive holds exactly the code pyproject.toml's [tool.deptry] holds to requirements.txt (it leaves
# out only the two packages that never ship); tests/repo/test_bundle.py checks that the two agree.
#
# The archive is deterministic: entries sorted by name, a fixed timestamp (1980-01-01), fixed
# permissions, no directory entries, no caches or bytecode. The same sources give the same bytes,
# so the object name Terraform derives from the archive's MD5 changes only when the code does,
# and only then are the functions rebuilt.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$root/build/functions-source.zip}"
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
python="${PYTHON:-python3}"

for required in functions/main.py shared/rlpipe/__init__.py requirements.txt; do
  if [[ ! -f "$root/$required" ]]; then
    echo "bundle: $required is missing; run this from a checkout of the repository" >&2
    exit 1
  fi
done

mkdir -p "$(dirname "$out")"
tmp="$(mktemp "${out}.XXXXXX")"
trap 'rm -f "$tmp"' EXIT
chmod 0644 "$tmp"

"$python" - "$root" "$tmp" <<'PY'
import os
import sys
import zipfile

root, out = sys.argv[1], sys.argv[2]
EPOCH = (1980, 1, 1, 0, 0, 0)
SKIP_DIRS = {"__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache"}
SKIP_SUFFIXES = (".pyc", ".pyo", ".so", ".egg-info")

# The packages of shared/rlpipe/ the deployed functions import (see the header).
SHIPPED_PACKAGES = ("core", "cluster", "control", "upstream", "reconcile", "publisher", "report")
# The packages that never ship, and why: each package must be in one of the two lists.
NOT_SHIPPED = {
    "local": "the local stand-ins and the stack that runs them (requirements-cli.txt)",
    "cli": "the rlpipe command (requirements-cli.txt)",
}


def walk(src, prefix):
    """(archive name, path) for every regular file under src, skipping caches and hidden files."""
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".")
                       and not d.endswith(".egg-info")]
        for name in filenames:
            if name.startswith(".") or name.endswith(SKIP_SUFFIXES):
                continue
            path = os.path.join(dirpath, name)
            if not os.path.isfile(path) or os.path.islink(path):
                continue
            rel = os.path.relpath(path, src).replace(os.sep, "/")
            yield (prefix + rel, path)


def library_files(src):
    """(archive name, path) for rlpipe/__init__.py and every file of the shipped packages."""
    for name in sorted(os.listdir(src)):
        path = os.path.join(src, name)
        if name in SKIP_DIRS or name.startswith(".") or name.endswith(SKIP_SUFFIXES):
            continue
        if os.path.isdir(path):
            if name in NOT_SHIPPED:
                continue
            if name not in SHIPPED_PACKAGES:
                sys.exit(f"bundle: shared/rlpipe/{name}/ is in neither SHIPPED_PACKAGES nor NOT_SHIPPED "
                         "of infra/bundle.sh; name it in one of them")
            yield from walk(path, f"rlpipe/{name}/")
        elif name == "__init__.py":
            yield ("rlpipe/__init__.py", path)
        else:
            sys.exit(f"bundle: shared/rlpipe/{name} is not in a package; move it into one that ships, "
                     "or name it in infra/bundle.sh")


entries = dict(walk(os.path.join(root, "functions"), ""))
library = dict(library_files(os.path.join(root, "shared", "rlpipe")))
clash = sorted(set(entries) & set(library))
if clash:
    sys.exit(f"bundle: names clash between functions/ and shared/rlpipe/: {clash}")
entries.update(library)
if "requirements.txt" in entries:
    sys.exit("bundle: functions/requirements.txt would shadow the repository's requirements.txt")
entries["requirements.txt"] = os.path.join(root, "requirements.txt")
if "main.py" not in entries:
    sys.exit("bundle: functions/main.py is missing")

with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
    for name in sorted(entries):
        info = zipfile.ZipInfo(name, date_time=EPOCH)
        info.compress_type = zipfile.ZIP_DEFLATED
        info.create_system = 3  # Unix, so external_attr carries the mode below
        info.external_attr = (0o100644 & 0xFFFF) << 16
        with open(entries[name], "rb") as fh:
            zf.writestr(info, fh.read())
print(f"bundle: {len(entries)} files", file=sys.stderr)
PY

mv -f "$tmp" "$out"
trap - EXIT
if command -v sha256sum >/dev/null 2>&1; then
  sum="$(sha256sum "$out" | cut -d' ' -f1)"
else
  sum="$("$python" -c 'import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest())' "$out")"
fi
echo "bundle: wrote $out (sha256 $sum)"
