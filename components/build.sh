#!/usr/bin/env bash
# Builds the real components of the local control plane from their Go modules, through the Go
# module proxy only, into $COMPONENTS_BIN (default: .cache/components/bin, git-ignored):
#   etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, jobset, kueue, pstest
#
#   components/build.sh            # whatever is missing or out of date
#   components/build.sh kueue      # one component
#
# A binary is rebuilt only when its inputs (versions.env, its module's go.mod/go.sum/main) change;
# Go's own build cache ($(go env GOCACHE)) makes a rebuild after that mostly a link. Each build's
# wall time goes to $COMPONENTS_BIN/build-times.tsv.
#
# One build at a time per bin folder: a second invocation (another `make test`, a second terminal)
# waits on $COMPONENTS_BIN/.build.lock until the first ends, then finds its binaries up to date
# instead of building them all again beside it.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(dirname "$HERE")"
BIN="${COMPONENTS_BIN:-$ROOT/.cache/components/bin}"
mkdir -p "$BIN"
# shellcheck source=versions.env
source "$HERE/versions.env"

if ! command -v go >/dev/null 2>&1; then
  echo "components: no Go toolchain on PATH; the real control plane needs Go (>= 1.24) and the module proxy" >&2
  exit 3
fi

if ! command -v flock >/dev/null 2>&1; then
  echo "components: no flock on PATH; install util-linux (flock keeps two builds from running at once)" >&2
  exit 3
fi
# Held until this script exits (the kernel drops the lock with the last holder of fd 9). The stamps
# are read only under the lock, so a build that waited sees what the other one built.
exec 9>"$BIN/.build.lock"
if ! flock --nonblock 9; then
  echo "components: another build into $BIN is running; waiting for it to end" >&2
  flock 9
fi

export CGO_ENABLED=0  # static binaries, as the upstream release builds
export GOFLAGS="-buildvcs=false -trimpath"
export GOTOOLCHAIN=local
NICE=(nice -n 10)

minor="${KUBERNETES_VERSION#v1.}"
minor="${minor%%.*}"
kube_ldflags() {
  # As upstream hack/lib/version.sh: Kueue parses the server's version and exits if it does not parse.
  local out="-s -w" pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    out+=" -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    out+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  echo "$out"
}

inputs_of() {  # the files a component is built from
  case "$1" in
    etcd) echo "$HERE/etcd" ;;
    kube-*|kubectl) echo "$HERE/kube/go.mod $HERE/kube/go.sum $HERE/kube/cmd/$1" ;;
    jobset) echo "$HERE/jobset" ;;
    pstest) echo "$HERE/pstest" ;;
    kueue) echo "" ;;
  esac
}

stamp_of() {
  local files
  # shellcheck disable=SC2046
  files=$(inputs_of "$1")
  { cat "$HERE/versions.env" "$HERE/build.sh"; [ -z "$files" ] || find $files -type f -print0 | sort -z | xargs -0 cat; } \
    | sha256sum | cut -d' ' -f1
}

build() {
  case "$1" in
    etcd | pstest) (cd "$HERE/$1" && "${NICE[@]}" go build -ldflags "-s -w" -o "$BIN/$1" .) ;;
    kube-apiserver | kube-controller-manager | kube-scheduler | kubectl)
      (cd "$HERE/kube" && "${NICE[@]}" go build -ldflags "$(kube_ldflags)" -o "$BIN/$1" "./cmd/$1") ;;
    jobset)  # a `tool` directive: `go install sigs.k8s.io/jobset@v` needs the proxy's @v/list, refused here
      (cd "$HERE/jobset" && "${NICE[@]}" go build -ldflags "-s -w \
        -X sigs.k8s.io/jobset/pkg/version.GitVersion=$JOBSET_VERSION \
        -X sigs.k8s.io/jobset/pkg/version.GitCommit=$JOBSET_COMMIT" -o "$BIN/jobset" sigs.k8s.io/jobset) ;;
    kueue)
      GOBIN="$BIN" "${NICE[@]}" go install -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION" \
        "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION" ;;
    *) echo "components: unknown component $1" >&2; exit 2 ;;
  esac
}

ALL=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl jobset kueue pstest)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${ALL[@]}")
for name in "${targets[@]}"; do
  want=$(stamp_of "$name")
  if [ -x "$BIN/$name" ] && [ "$(cat "$BIN/$name.stamp" 2>/dev/null)" = "$want" ]; then
    continue
  fi
  echo "components: building $name" >&2
  started=$(date +%s)
  build "$name"
  echo "$want" > "$BIN/$name.stamp"
  printf '%s\t%s\t%ss\n' "$(date -u +%FT%TZ)" "$name" "$(( $(date +%s) - started ))" >> "$BIN/build-times.tsv"
done
