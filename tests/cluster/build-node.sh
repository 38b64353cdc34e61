#!/usr/bin/env bash
# Build (or reuse) the pinned binaries of the real test node (tests/cluster/README.md).
#
#   tests/cluster/build-node.sh            build what is missing, print the bin directory
#   tests/cluster/build-node.sh --bin-dir  print the bin directory only (exit 1 if incomplete)
#   tests/cluster/build-node.sh --no-k8s   build all but kubelet and kube-proxy (they share Go's
#                                          build cache with the control plane: build them after it)
#
# Binaries go to ~/.cache/surreal-kube/node/<versions-key>/bin (override the root with
# SURREAL_KUBE_NODE_CACHE); CNI plugins to bin/cni. The key names every pinned version and hashes
# the Go module files and flags, so a change of pin never reuses stale binaries. Only the last
# line of stdout is the bin directory; progress goes to stderr. runc comes from Debian (`runc`).
set -euo pipefail

K8S_VERSION=v1.37.2          # kubelet, kube-proxy: go/kubenode (replace lines as in go/k8s)
CONTAINERD_VERSION=v2.4.2    # containerd, containerd-shim-runc-v2, ctr
CNI_PLUGINS_VERSION=v1.10.0  # bridge, host-local, loopback, portmap
COREDNS_VERSION=v1.15.0      # go/coredns: our main on github.com/coredns/coredns

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/go-cache.sh"
cache_base=${XDG_CACHE_HOME:-$HOME/.cache}/surreal-kube
cache_root=${SURREAL_KUBE_NODE_CACHE:-$cache_base/node}

k8s_ldflags="-s -w"
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
  k8s_ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=37"
  k8s_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
ctrd_pkg=github.com/containerd/containerd/v2
ctrd_ldflags="-s -w -X $ctrd_pkg/version.Version=$CONTAINERD_VERSION"
ctrd_ldflags+=" -X $ctrd_pkg/version.Package=github.com/containerd/containerd/v2"
ctrd_tags=urfave_cli_no_docs
shim_tags="urfave_cli_no_docs no_grpc"   # as containerd's Makefile builds the shim
cni_pkg=github.com/containernetworking/plugins
cni_ldflags="-s -w -X $cni_pkg/pkg/utils/buildversion.BuildVersion=$CNI_PLUGINS_VERSION"
coredns_ldflags="-s -w"
if ! grep -q "^require github.com/coredns/coredns $COREDNS_VERSION\$" "$here/go/coredns/go.mod"; then
  echo "build-node.sh: go/coredns/go.mod does not require coredns $COREDNS_VERSION" >&2
  exit 1
fi

inputs_hash=$( (cd "$here/go" && cat kubenode/go.mod kubenode/go.sum pause/go.mod pause/main.go \
  coredns/go.mod coredns/go.sum coredns/main.go ../go-env.sh; \
  echo "$k8s_ldflags|$ctrd_ldflags|$ctrd_tags|$shim_tags|$cni_ldflags|$coredns_ldflags") \
  | sha256sum | cut -c1-10)
key="k8s-${K8S_VERSION}_containerd-${CONTAINERD_VERSION}_cni-${CNI_PLUGINS_VERSION}"
key+="_coredns-${COREDNS_VERSION}_${inputs_hash}"
dest="$cache_root/$key"
bin="$dest/bin"
binaries=(kubelet kube-proxy containerd containerd-shim-runc-v2 ctr coredns pause
  cni/bridge cni/host-local cni/loopback cni/portmap)

if [[ -f "$bin/.complete" ]]; then
  [[ "${1:-}" == "--bin-dir" ]] || prune_superseded "$dest" "k8s-*"
  echo "$bin"
  exit 0
fi
if [[ "${1:-}" == "--bin-dir" ]]; then
  echo "$bin"
  exit 1
fi
no_k8s=false
[[ "${1:-}" == "--no-k8s" ]] && no_k8s=true

# Go: $GO, else `go` on PATH or in /usr/local/go, else the toolchain build.sh fetched (make
# test runs build.sh first).
go=${GO:-}
if [[ -z "$go" ]]; then
  if command -v go >/dev/null; then go=$(command -v go)
  elif [[ -x /usr/local/go/bin/go ]]; then go=/usr/local/go/bin/go
  else
    cp_root=${SURREAL_KUBE_CONTROLPLANE_CACHE:-$cache_base/controlplane}
    go=$cp_root/go/go1.26.8.linux-amd64/bin/go
    [[ -x "$go" ]] || { echo "build-node.sh: no Go; run tests/cluster/build.sh first" >&2; exit 1; }
  fi
fi

mkdir -p "$dest"
exec 9>"$dest/.lock"
if ! flock -n 9; then
  echo "build-node.sh: another build of $key is running; waiting for it" >&2
  flock 9
fi
if [[ -f "$bin/.complete" ]]; then
  echo "$bin"
  exit 0
fi

partial="$dest/bin.partial"
mkdir -p "$partial/cni"
source "$here/go-env.sh"
use_go_cache
nice_cmd=(nice -n "${BUILD_NICE:-10}")
start=$(date +%s)
timings=()

build_one() {  # name (relative to bin), then the command that writes "$partial/$name.tmp"
  local name=$1; shift
  if [[ -x "$partial/$name" ]]; then
    echo "build-node.sh: $name already built" >&2
    return
  fi
  local t0; t0=$(date +%s)
  echo "build-node.sh: building $name" >&2
  "$@"
  mv "$partial/$name.tmp" "$partial/$name"
  echo "build-node.sh: built $name in $(( $(date +%s) - t0 ))s" >&2
  timings+=("$name $(( $(date +%s) - t0 ))s")
}

go_build() {  # name, module dir, ldflags, package
  (cd "$here/go/$2" && GOFLAGS=-mod=readonly "${nice_cmd[@]}" "$go" build \
    "${go_flags[@]}" -ldflags="$3" -o "$partial/$1.tmp" "$4")
}

go_install() {  # name, tags, ldflags, package@version (pinned by that module's own go.sum)
  local gobin="$partial/.gobin-${1//\//-}"
  rm -rf "$gobin"
  mkdir -p "$gobin"
  (cd "$partial" && GOBIN="$gobin" GOFLAGS= "${nice_cmd[@]}" "$go" install \
    "${go_flags[@]}" -tags="$2" -ldflags="$3" "$4")
  mv "$gobin/$(basename "$1")" "$partial/$1.tmp"
  rm -rf "$gobin"
}

build_one pause go_build pause pause "-s -w" .
build_one ctr go_install ctr "$ctrd_tags" "$ctrd_ldflags" "$ctrd_pkg/cmd/ctr@$CONTAINERD_VERSION"
build_one containerd-shim-runc-v2 go_install containerd-shim-runc-v2 "$shim_tags" "$ctrd_ldflags" \
  "$ctrd_pkg/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION"
build_one containerd go_install containerd "$ctrd_tags" "$ctrd_ldflags" \
  "$ctrd_pkg/cmd/containerd@$CONTAINERD_VERSION"
for p in main/bridge main/loopback ipam/host-local meta/portmap; do
  build_one "cni/${p#*/}" go_install "cni/${p#*/}" "" "$cni_ldflags" \
    "$cni_pkg/plugins/$p@$CNI_PLUGINS_VERSION"
done
# our main (go/coredns) with only the plugins the node's Corefile uses: a fraction of the build
build_one coredns go_build coredns coredns "$coredns_ldflags" .
if $no_k8s; then
  echo "build-node.sh: built all but kubelet and kube-proxy in $(( $(date +%s) - start ))s:" \
    "${timings[*]:-nothing new}" >&2
  exit 0
fi
for cmd in kubelet kube-proxy; do
  build_one "$cmd" go_build "$cmd" kubenode "$k8s_ldflags" "k8s.io/kubernetes/cmd/$cmd"
done

for b in "${binaries[@]}"; do
  [[ -x "$partial/$b" ]] || { echo "build-node.sh: $b missing after build" >&2; exit 1; }
done
cat > "$partial/VERSIONS" <<EOF
kubernetes $K8S_VERSION (kubelet, kube-proxy)
containerd $CONTAINERD_VERSION
cni-plugins $CNI_PLUGINS_VERSION
coredns $COREDNS_VERSION
go $("$go" env GOVERSION)
EOF
touch "$partial/.complete"
rm -rf "$bin"
mv "$partial" "$bin"
prune_superseded "$dest" "k8s-*"
echo "build-node.sh: built $key in $(( $(date +%s) - start ))s ($(du -sh "$bin" | cut -f1)):" \
  "${timings[*]:-nothing new}" >&2
echo "$bin"
