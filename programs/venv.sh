#!/usr/bin/env bash
# A tier's interpreter, installed from its lock (every package pinned with its hashes):
# - the programs tier: MaxText 0.2.4 and its CPU set, from programs/requirements-maxtext.lock, into
#   $PROGRAMS_CACHE/venv (default .cache/programs/venv, git-ignored; docs/programs.md);
# - the serving tier (--tier serving): torch and transformers, from
#   programs/requirements-serving.lock, into $SERVING_CACHE/venv (default .cache/serving/venv;
#   docs/evaluation.md).
#
#   programs/venv.sh                   # build the programs tier if missing or if the lock changed
#   programs/venv.sh --tier serving    # the same for the serving tier
#   programs/venv.sh --find-python     # print the interpreter it would use, or exit 3 saying why none
#
# MaxText 0.2.4 needs Python >= 3.12 (PEP 695 `type` statements in its kernels), so the venv is made
# from pyenv's newest 3.12 (~/.pyenv/versions/3.12.*), else its newest 3.13, else python3.12 or
# python3.13 on PATH; PROGRAMS_PYTHON names one explicitly. The venv is rebuilt only when its stamp
# (the lock, this script and the interpreter's version) changes. One build at a time: a second
# invocation waits on $PROGRAMS_CACHE/.venv.lock, then finds the venv up to date. Each build's
# wall time goes to $PROGRAMS_CACHE/build-times.tsv.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(dirname "$HERE")"
TIER=programs
if [ "${1:-}" = "--tier" ]; then
  TIER="${2:-}"
  shift 2
fi
case "$TIER" in
  programs)
    CACHE="${PROGRAMS_CACHE:-$ROOT/.cache/programs}"
    LOCK="$HERE/requirements-maxtext.lock"
    WHAT="MaxText 0.2.4" ;;
  serving)
    CACHE="${SERVING_CACHE:-$ROOT/.cache/serving}"
    LOCK="$HERE/requirements-serving.lock"
    WHAT="torch, transformers and lm-evaluation-harness (5.5 GB the first time)" ;;
  *)
    echo "venv.sh: --tier is programs or serving, not '$TIER'" >&2
    exit 2 ;;
esac
VENV="$CACHE/venv"

find_python() {
  local candidate
  if [ -n "${PROGRAMS_PYTHON:-}" ]; then
    candidate=$(command -v "$PROGRAMS_PYTHON" || true)
    if [ -z "$candidate" ] || ! "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
      echo "programs: PROGRAMS_PYTHON=$PROGRAMS_PYTHON is not a Python >= 3.12" >&2
      return 1
    fi
    echo "$candidate"
    return 0
  fi
  for minor in 3.12 3.13; do
    # newest patch release first
    candidate=$(find "${PYENV_ROOT:-$HOME/.pyenv}/versions" -maxdepth 1 -name "$minor.*" 2>/dev/null | sort -V | tail -n 1)
    if [ -n "$candidate" ] && [ -x "$candidate/bin/python" ]; then
      echo "$candidate/bin/python"
      return 0
    fi
  done
  for name in python3.12 python3.13; do
    if command -v "$name" >/dev/null 2>&1; then
      command -v "$name"
      return 0
    fi
  done
  return 1
}

if ! PYTHON=$(find_python); then
  echo "programs: no Python 3.12 or 3.13 (MaxText 0.2.4 needs >= 3.12): install one (pyenv install 3.12) or set PROGRAMS_PYTHON" >&2
  exit 3
fi
if [ "${1:-}" = "--find-python" ]; then
  echo "$PYTHON"
  exit 0
fi

if ! command -v flock >/dev/null 2>&1; then
  echo "programs: no flock on PATH; install util-linux (flock keeps two builds from running at once)" >&2
  exit 3
fi
mkdir -p "$CACHE"
exec 9>"$CACHE/.venv.lock"
if ! flock --nonblock 9; then
  echo "$TIER: another build of $VENV is running; waiting for it to end" >&2
  flock 9
fi

want=$({ cat "$LOCK" "$HERE/venv.sh"; "$PYTHON" -c 'import sys; print(sys.version)'; } | sha256sum | cut -d' ' -f1)
if [ -x "$VENV/bin/python" ] && [ "$(cat "$VENV/.stamp" 2>/dev/null)" = "$want" ]; then
  exit 0
fi

echo "$TIER: installing $WHAT from $(basename "$LOCK") into $VENV (a few minutes)" >&2
started=$(date +%s)
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
# Every requirement carries its hashes, so pip refuses anything else (--require-hashes).
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r "$LOCK"
"$VENV/bin/python" -m pip check >&2
echo "$want" > "$VENV/.stamp"
printf '%s\tvenv\t%ss\n' "$(date -u +%FT%TZ)" "$(( $(date +%s) - started ))" >> "$CACHE/build-times.tsv"
