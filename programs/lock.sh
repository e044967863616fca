#!/usr/bin/env bash
# Regenerates a tier's lock from its .in: every package of the set pinned to one version, with the
# sha256 of each of its files on PyPI (pip-compile --generate-hashes), resolved under the tier's own
# Python (programs/venv.sh --find-python), so the markers are those of the interpreter that installs
# it. Pins already in the lock are kept unless --upgrade is given (`make programs-lock UPGRADE=1`);
# to move MaxText, edit the .in first (docs/programs.md). pip-tools runs from a throwaway venv,
# never from the project's.
#
#   programs/lock.sh [--upgrade]                  # the programs tier: requirements-maxtext.lock
#   programs/lock.sh --tier serving [--upgrade]   # the serving tier: requirements-serving.lock
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
NAME=maxtext
if [ "${1:-}" = "--tier" ]; then
  case "${2:-}" in
    programs) NAME=maxtext ;;
    serving) NAME=serving ;;
    *) echo "lock.sh: --tier is programs or serving, not '${2:-}'" >&2; exit 2 ;;
  esac
  shift 2
fi
PYTHON=$("$HERE/venv.sh" --find-python)
TOOL=$(mktemp -d)
trap 'rm -rf "$TOOL"' EXIT
"$PYTHON" -m venv "$TOOL/venv"
"$TOOL/venv/bin/python" -m pip install --quiet --disable-pip-version-check 'pip-tools==7.6.2'
cd "$HERE"
"$TOOL/venv/bin/pip-compile" --quiet --generate-hashes --allow-unsafe --strip-extras \
  --no-emit-index-url --no-emit-find-links "$@" \
  --output-file="requirements-$NAME.lock" "requirements-$NAME.in"
