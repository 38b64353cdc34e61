#!/usr/bin/env bash
# Build (or reuse) the pinned add-ons of the test cluster (tests/cluster/README.md, "Add-ons"):
#
#   tests/cluster/build-addons.sh [NAME...]          build what is missing, print each bin directory
#   tests/cluster/build-addons.sh --bin-dir NAME     print NAME's bin directory (exit 1 if incomplete)
#
# NAME is one of: karpenter (the node autoscaler, with its kwok cloud provider), kueue (Kueue's
# manager), kube-router (its NetworkPolicy controller, for the real node), registry (a loopback
# OCI registry: go-containerregistry's pkg/registry); none means all.
# Each goes to its own ~/.cache/surreal-kube/addons/<name>-<version>_<hash>/bin (override the root
# with SURREAL_KUBE_ADDONS_CACHE), where the hash covers its Go module files and link flags, so a
# change of pin never reuses a stale binary. Only stdout's lines are bin directories, one per
# NAME in order; progress goes to stderr.
set -euo pipefail

KARPENTER_VERSION=v1.13.0      # go/karpenter: sigs.k8s.io/karpenter/kwok
KUEUE_VERSION=v0.17.0          # go/kueue: sigs.k8s.io/kueue/cmd/kueue
KUBE_ROUTER_VERSION=v2.1.0     # go/netpol: github.com/cloudnativelabs/kube-router/v2/cmd/kube-router
GGCR_VERSION=v0.22.1           # go/registry: our main on github.com/google/go-containerregistry
ALL=(karpenter kueue kube-router registry)

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/go-cache.sh"
cache_root=${SURREAL_KUBE_ADDONS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/surreal-kube/addons}

# name -> module dir, version, package, link flags
declare -A module version package ldflags
module[karpenter]=karpenter
version[karpenter]=$KARPENTER_VERSION
package[karpenter]=sigs.k8s.io/karpenter/kwok
ldflags[karpenter]="-s -w"
module[kueue]=kueue
version[kueue]=$KUEUE_VERSION
package[kueue]=sigs.k8s.io/kueue/cmd/kueue
ldflags[kueue]="-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION"
ldflags[kueue]+=" -X sigs.k8s.io/kueue/pkg/version.BuildDate=1970-01-01T00:00:00Z"
module[kube-router]=netpol
version[kube-router]=$KUBE_ROUTER_VERSION
package[kube-router]=github.com/cloudnativelabs/kube-router/v2/cmd/kube-router
ldflags[kube-router]="-s -w -X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=$KUBE_ROUTER_VERSION"
module[registry]=registry
version[registry]=$GGCR_VERSION
package[registry]=.
ldflags[registry]="-s -w"
# name -> its Go module and the CRD folders in it (copied into bin/crds, where the tests read them)
declare -A modpath crds
modpath[karpenter]=sigs.k8s.io/karpenter
crds[karpenter]="pkg/apis/crds kwok/apis/crds"
modpath[kueue]=sigs.k8s.io/kueue
crds[kueue]="config/components/crd/bases"
modpath[kube-router]=github.com/cloudnativelabs/kube-router/v2
crds[kube-router]=""
modpath[registry]=github.com/google/go-containerregistry
crds[registry]=""
# name -> other files of its Go module copied beside the binary, as SRC:DEST (DEST under bin).
# Not part of the hash: they never change what is compiled, and a complete bin directory that
# lacks one gets it from the module cache without a rebuild (`build-addons.sh NAME`).
declare -A extras
extras[kueue]="config/components/webhook/manifests.yaml:webhook/manifests.yaml"

bin_dir() {  # name -> its bin directory (whether built or not)
  local name=$1 hash
  hash=$( (cd "$here/go/${module[$name]}" && cat go.mod go.sum "$here/go-env.sh"; echo "${ldflags[$name]}|${crds[$name]}") \
    | sha256sum | cut -c1-10)
  echo "$cache_root/$name-${version[$name]}_$hash/bin"
}

has_extras() {  # name bin -> whether every extra file of name is in bin
  local pair
  for pair in ${extras[$1]:-}; do [[ -f "$2/${pair#*:}" ]] || return 1; done
}

check_name() {
  [[ -n "${module[$1]:-}" ]] && return
  echo "build-addons.sh: unknown add-on '$1' (known: ${ALL[*]})" >&2
  exit 2
}

if [[ "${1:-}" == "--bin-dir" ]]; then
  [[ $# -eq 2 ]] || { echo "usage: build-addons.sh --bin-dir NAME" >&2; exit 2; }
  check_name "$2"
  bin=$(bin_dir "$2")
  echo "$bin"
  [[ -f "$bin/.complete" ]] && has_extras "$2" "$bin"
  exit
fi

names=("$@")
[[ ${#names[@]} -gt 0 ]] || names=("${ALL[@]}")
for n in "${names[@]}"; do check_name "$n"; done

# Go: $GO, else `go` on PATH or in /usr/local/go, else the toolchain build.sh fetched.
go=${GO:-}
if [[ -z "$go" ]]; then
  if command -v go >/dev/null; then go=$(command -v go)
  elif [[ -x /usr/local/go/bin/go ]]; then go=/usr/local/go/bin/go
  else
    cp_root=${SURREAL_KUBE_CONTROLPLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/surreal-kube/controlplane}
    go=$cp_root/go/go1.26.8.linux-amd64/bin/go
    [[ -x "$go" ]] || { echo "build-addons.sh: no Go; run tests/cluster/build.sh first" >&2; exit 1; }
  fi
fi
source "$here/go-env.sh"
use_go_cache
export GOFLAGS=-mod=readonly
nice_cmd=(nice -n "${BUILD_NICE:-10}")

copy_extras() {  # name bin: copy name's extra module files into bin
  local name=$1 bin=$2 moddir pair
  [[ -n "${extras[$name]:-}" ]] || return 0
  moddir=$(cd "$here/go/${module[$name]}" && "$go" list -m -f '{{.Dir}}' "${modpath[$name]}")
  for pair in ${extras[$name]}; do
    install -D -m 644 "$moddir/${pair%%:*}" "$bin/${pair#*:}"
  done
}

build() {  # name: build it into its bin directory unless it is complete
  local name=$1 bin dest t0
  bin=$(bin_dir "$name")
  dest=$(dirname "$bin")
  if [[ -f "$bin/.complete" ]]; then
    has_extras "$name" "$bin" || copy_extras "$name" "$bin"
    prune_superseded "$dest" "$name-v*"
    return
  fi
  mkdir -p "$dest"
  exec 9>"$dest/.lock"
  if ! flock -n 9; then
    echo "build-addons.sh: another build of $name is running; waiting for it" >&2
    flock 9
  fi
  if [[ ! -f "$bin/.complete" ]]; then
    t0=$(date +%s)
    echo "build-addons.sh: building $name ${version[$name]}" >&2
    rm -rf "$dest/bin.partial"
    mkdir -p "$dest/bin.partial"
    (cd "$here/go/${module[$name]}" && "${nice_cmd[@]}" "$go" build "${go_flags[@]}" \
      -ldflags="${ldflags[$name]}" -o "$dest/bin.partial/$name" "${package[$name]}")
    local moddir dir
    moddir=$(cd "$here/go/${module[$name]}" && "$go" list -m -f '{{.Dir}}' "${modpath[$name]}")
    for dir in ${crds[$name]}; do
      mkdir -p "$dest/bin.partial/crds"
      cp "$moddir/$dir"/*.yaml "$dest/bin.partial/crds/"
    done
    copy_extras "$name" "$dest/bin.partial"
    printf '%s %s\ngo %s\n' "$name" "${version[$name]}" "$("$go" env GOVERSION)" \
      > "$dest/bin.partial/VERSIONS"
    touch "$dest/bin.partial/.complete"
    rm -rf "$bin"
    mv "$dest/bin.partial" "$bin"
    prune_superseded "$dest" "$name-v*"
    echo "build-addons.sh: built $name in $(( $(date +%s) - t0 ))s" \
      "($(du -sh "$bin" | cut -f1))" >&2
  fi
  exec 9>&-
}

for n in "${names[@]}"; do build "$n"; done
for n in "${names[@]}"; do bin_dir "$n"; done
