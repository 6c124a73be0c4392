#!/usr/bin/env bash
# Put a real Kubernetes control plane into one directory, the layout controller-runtime's envtest expects:
#
#   DIR/kube-apiserver, DIR/kube-scheduler,  built with this machine's Go from the k8s.io/kubernetes module
#   DIR/kube-controller-manager              of one release (fetched through the Go module proxy)
#   DIR/etcd                                 the etcd on the PATH, else Debian's etcd-server (apt-get)
#   DIR/.k8s-version                         the release DIR holds, written last
#
# Usage:  scripts/install-control-plane.sh DIR          prints DIR (absolute) and nothing else on success
#         K8S_VERSION=v1.37.2 (the default) picks the release
# Then:   export KUBEBUILDER_ASSETS=DIR                  the tests/controlplane suite runs when this is set
#
# A DIR that already holds the release (all three commands) is left as it is (no Go needed); one that holds the
# release but misses a command (a DIR made before kube-controller-manager was added) gets only what it misses.
# The first build took 13 minutes on a busy 2-core machine with Go's caches empty; Go's module and build caches
# stay in their default places, so building the same release again, into another DIR, took 30 seconds.
set -euo pipefail

readonly prog=${0##*/}
readonly default_version=v1.37.2
readonly go_floor=1.26 # the minimum when the release's go.mod names none
readonly commands=(kube-apiserver kube-scheduler kube-controller-manager)

die() {
    echo "$prog: $*" >&2
    exit 1
}

# version_ge A B: true when version A (dotted numbers) is B or newer
version_ge() {
    [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n 1)" = "$2" ]
}

[ $# -eq 1 ] && [ -n "$1" ] || die "usage: $prog DIR (K8S_VERSION=$default_version picks the Kubernetes release)"
version=${K8S_VERSION:-$default_version}
[[ $version =~ ^v1\.([0-9]+)\.([0-9]+)(-[0-9A-Za-z.]+)?$ ]] ||
    die "K8S_VERSION must be a Kubernetes release such as $default_version, not '$version'"
minor=${BASH_REMATCH[1]}
staging_version=v0.${version#v1.} # k8s.io/api, k8s.io/client-go, ... publish v0.MINOR.PATCH for v1.MINOR.PATCH

[ ! -e "$1" ] || [ -d "$1" ] || die "$1 exists and is not a directory"
mkdir -p "$1" || die "cannot create $1"
dir=$(cd "$1" && pwd)

# The build module's only source: imports of the commands, so that go mod tidy resolves what they need.
write_tools_go() {
    {
        printf '//go:build tools\n\npackage tools\n\nimport (\n'
        printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "${commands[@]}"
        printf ')\n'
    } >tools.go
}

# missing: the commands DIR lacks for the release, one a line (all of them when it holds another release or none)
missing() {
    local c
    if [ "$(cat "$dir/.k8s-version" 2>/dev/null)" != "$version" ]; then
        printf '%s\n' "${commands[@]}"
        return
    fi
    for c in "${commands[@]}"; do
        [ -x "$dir/$c" ] || printf '%s\n' "$c"
    done
}

# build CMD...: build these commands of the release into DIR
build() {
    local wanted=("$@") names
    names=$(printf '%s, ' "${wanted[@]}")
    names=${names%, }
    command -v go >/dev/null 2>&1 ||
        die "needs Go ($go_floor or newer) on the PATH to build $names $version (https://go.dev/dl)"
    # The Go that is checked is the Go that builds: no automatic toolchain download, no go.work, no vendoring.
    export GOTOOLCHAIN=local GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0
    local have
    have=$(go env GOVERSION 2>/dev/null | grep -oE '[0-9]+(\.[0-9]+)+' | head -n 1) ||
        die "cannot tell which Go '$(command -v go)' is (go env GOVERSION)"

    local work
    work=$(mktemp -d)
    # shellcheck disable=SC2064 # expand $work now: it is local
    trap "rm -rf '$work'" EXIT
    cd "$work"

    # The release's go.mod: which Go it needs, and which staging modules it replaces with ./staging paths.
    local info gomod
    info=$(go mod download -json "k8s.io/kubernetes@$version" 2>&1) || true
    gomod=$(sed -nE 's/^[[:space:]]*"GoMod": "(.*)",?$/\1/p' <<<"$info")
    if [ -z "$gomod" ] || [ ! -f "$gomod" ]; then
        local error
        error=$(sed -nE 's/^[[:space:]]*"Error": "(.*)",?$/\1/p' <<<"$info" | head -n 1)
        [ -n "$error" ] || error=$(head -n 1 <<<"$info")
        die "cannot download k8s.io/kubernetes@$version: ${error%%\\n*}" # the first line of Go's message
    fi
    local need
    need=$(sed -nE 's/^go ([0-9.]+)$/\1/p' "$gomod")
    need=${need:-$go_floor}
    version_ge "$have" "$need" ||
        die "Go $have is too old: Kubernetes $version needs Go $need or newer to build (https://go.dev/dl)"
    local staging
    staging=$(sed -nE 's/^(replace)?[[:space:]]*([^[:space:]]+)[[:space:]]+=>[[:space:]]+\.\/staging\/.*/\2/p' "$gomod" | sort -u)
    [ -n "$staging" ] || die "found no ./staging replaces in k8s.io/kubernetes@$version's go.mod"

    # A module of our own that requires the release. A consumer's build ignores the release's ./staging replaces,
    # so replace each staging module with its published version, and keep the release's godebug defaults.
    local edits=(-require="k8s.io/kubernetes@$version") m setting
    for m in $staging; do
        edits+=(-replace="$m=$m@$staging_version")
    done
    while read -r setting; do
        edits+=(-godebug="$setting")
    done < <(sed -nE 's/^godebug[[:space:]]+([^(].*)$/\1/p' "$gomod")
    local log=$work/build.log
    { go mod init local/control-plane && go mod edit "${edits[@]}" && write_tools_go && go mod tidy; } >"$log" 2>&1 ||
        { tail -n 20 "$log" >&2; die "cannot resolve the modules of k8s.io/kubernetes@$version (log above)"; }

    # The version the binaries and /version report (Kubernetes' own builds set these the same way).
    local ldflags="-s -w" pkg c pkgs=()
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
    done
    for c in "${wanted[@]}"; do
        pkgs+=("k8s.io/kubernetes/cmd/$c")
    done
    mkdir bin
    go build -trimpath -tags=notest -ldflags "$ldflags" -o bin/ "${pkgs[@]}" >"$log" 2>&1 ||
        { tail -n 20 "$log" >&2; die "go build of $names $version failed (log above)"; }

    # Replace DIR's binaries only once all are built; .k8s-version goes last, so an interrupted run rebuilds.
    rm -f "$dir/.k8s-version"
    for c in "${wanted[@]}"; do
        mv -f "bin/$c" "$dir/"
    done
    echo "$version" >"$dir/.k8s-version"
    cd /
}

mapfile -t wanted < <(missing)
if [ ${#wanted[@]} -gt 0 ]; then
    (build "${wanted[@]}")
fi

if [ ! -x "$dir/etcd" ]; then
    if ! command -v etcd >/dev/null 2>&1; then
        export DEBIAN_FRONTEND=noninteractive
        { apt-get install -y -qq --no-install-recommends etcd-server >/dev/null 2>&1 ||
            { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq --no-install-recommends etcd-server >/dev/null 2>&1; }; } ||
            die "needs etcd: put it on the PATH, or install Debian's etcd-server (apt-get install etcd-server)"
    fi
    ln -sf "$(command -v etcd)" "$dir/etcd"
fi
echo "$dir"
