#!/usr/bin/env bash
# Build (or reuse) the pinned control-plane binaries for the cluster tests.
#
#   tests/cluster/build.sh            build what is missing, print the bin directory
#   tests/cluster/build.sh --bin-dir  print the bin directory only (exit 1 if incomplete)
#
# Binaries go to ~/.cache/surreal-kube/controlplane/<versions-key>/bin (override the root
# with SURREAL_KUBE_CONTROLPLANE_CACHE). The key names every pinned version and hashes the Go
# module files, so a change of pin builds a new directory and never reuses a stale one.
# Only the last line of stdout is the bin directory; progress goes to stderr.
set -euo pipefail

# The pins. Kubernetes' staging modules are pinned to the matching v0.37.x in go/k8s/go.mod.
K8S_VERSION=v1.37.2
ETCD_VERSION=v3.7.3     # go/etcd/go.mod; Kubernetes 1.37 tests against etcd 3.7.0
KWOK_VERSION=v0.8.0
HELM_VERSION=v3.22.0
HELM_K8S_MINOR=37       # k8s.io/client-go v0.37.x in helm's go.mod

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/go-cache.sh"
cache_root=${SURREAL_KUBE_CONTROLPLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/surreal-kube/controlplane}

# Version stamps, as the projects' own release builds set them.
k8s_ldflags="-s -w"
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
  k8s_ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=37"
  k8s_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
kwok_ldflags="-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}"
kwok_ldflags+=" -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=${K8S_VERSION#v}"
helm_ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
helm_ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  helm_ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$HELM_K8S_MINOR"
done

# The key hashes everything that shapes the binaries: the Go module files, the compile and link
# flags.
inputs_hash=$( (cd "$here/go" && cat k8s/go.mod k8s/go.sum etcd/go.mod etcd/go.sum etcd/main.go \
  certgen/go.mod certgen/main.go ../go-env.sh; echo "$k8s_ldflags $kwok_ldflags $helm_ldflags") \
  | sha256sum | cut -c1-10)
key="k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_helm-${HELM_VERSION}_${inputs_hash}"
dest="$cache_root/$key"
bin="$dest/bin"
binaries=(certgen etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok helm)

if [[ -f "$bin/.complete" ]]; then
  [[ "${1:-}" == "--bin-dir" ]] || prune_superseded "$dest" "k8s-*"
  echo "$bin"
  exit 0
fi
if [[ "${1:-}" == "--bin-dir" ]]; then
  echo "$bin"
  exit 1
fi

# Go: $GO, else `go` on PATH or in /usr/local/go, else this pinned toolchain, fetched once from
# the Go module proxy exactly as `GOTOOLCHAIN=go1.26.8` would (golang.org/toolchain module).
GO_BOOTSTRAP=go1.26.8
GO_BOOTSTRAP_SHA256_linux_amd64=30c2b1bf7dcc88d3eb0a1364e47ddd9128edb3110a30e8a0ef61cd5856b31de7
bootstrap_go() {
  local arch zip dir want sum
  case $(uname -m) in x86_64) arch=amd64 ;; *) arch=unsupported ;; esac
  dir="$cache_root/go/$GO_BOOTSTRAP.linux-$arch"
  if [[ -x "$dir/bin/go" ]]; then echo "$dir/bin/go"; return; fi
  want=GO_BOOTSTRAP_SHA256_linux_$arch
  if [[ -z "${!want:-}" ]]; then
    echo "build.sh: no Go found and no pinned toolchain for $(uname -m); install Go >= 1.26" >&2
    return 1
  fi
  # The proxy is the one Go itself is configured with ($GOPROXY: its first real entry); with no
  # Go installed there is no `go env` to ask, and no proxy's address belongs in this script.
  local proxy
  proxy=$(tr ',|' '\n\n' <<<"${GOPROXY:-}" | grep -v -x -e '' -e direct -e off | head -n1 || true)
  if [[ -z "$proxy" ]]; then
    echo "build.sh: no Go found and GOPROXY names no module proxy; install Go >= 1.26" \
      "or set GOPROXY to fetch the pinned $GO_BOOTSTRAP toolchain" >&2
    return 1
  fi
  echo "build.sh: fetching $GO_BOOTSTRAP from the Go module proxy (\$GOPROXY)" >&2
  mkdir -p "$cache_root/go"
  zip="$cache_root/go/$GO_BOOTSTRAP.zip.$$"
  curl -fsSL --retry 3 -o "$zip" \
    "${proxy%/}/golang.org/toolchain/@v/v0.0.1-$GO_BOOTSTRAP.linux-$arch.zip"
  sum=$(sha256sum "$zip" | cut -d' ' -f1)
  if [[ "$sum" != "${!want}" ]]; then
    echo "build.sh: $zip has sha256 $sum, expected ${!want}" >&2
    return 1
  fi
  rm -rf "$dir.tmp.$$"
  python3 - "$zip" "$dir.tmp.$$" <<'PY'
import os, sys, zipfile
zip_path, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(zip_path) as z:
    for info in z.infolist():
        parts = info.filename.split("/", 2)  # golang.org / toolchain@v0.0.1-go... / path
        name = parts[2] if len(parts) == 3 else ""
        if not name or info.is_dir():
            continue
        path = os.path.join(out, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with z.open(info) as src, open(path, "wb") as dst:
            dst.write(src.read())
        # Module zips keep no file modes: make the tools executable, as the go command does.
        if name.startswith("bin/") or name.startswith("pkg/tool/"):
            os.chmod(path, 0o755)
PY
  rm -f "$zip"
  mv "$dir.tmp.$$" "$dir"
  echo "$dir/bin/go"
}

go=${GO:-}
if [[ -z "$go" ]]; then
  if command -v go >/dev/null; then go=$(command -v go)
  elif [[ -x /usr/local/go/bin/go ]]; then go=/usr/local/go/bin/go
  else go=$(bootstrap_go)
  fi
fi

mkdir -p "$dest"
# One builder at a time; a second waits, then finds the work done.
exec 9>"$dest/.lock"
if ! flock -n 9; then
  echo "build.sh: another build of $key is running; waiting for it" >&2
  flock 9
fi
if [[ -f "$bin/.complete" ]]; then
  echo "$bin"
  exit 0
fi

partial="$dest/bin.partial"
mkdir -p "$partial"
source "$here/go-env.sh"
use_go_cache
export GOFLAGS=-mod=readonly
# A build may have to run beside tests; stay out of their way.
nice_cmd=(nice -n "${BUILD_NICE:-10}")
start=$(date +%s)

build_one() {  # name, then the command that writes "$partial/$name.tmp"
  local name=$1; shift
  if [[ -x "$partial/$name" ]]; then
    echo "build.sh: $name already built" >&2
    return
  fi
  local t0; t0=$(date +%s)
  echo "build.sh: building $name" >&2
  "$@"
  mv "$partial/$name.tmp" "$partial/$name"
  echo "build.sh: built $name in $(( $(date +%s) - t0 ))s" >&2
}

go_build() {  # name, module dir, ldflags, package
  (cd "$here/go/$2" && "${nice_cmd[@]}" "$go" build "${go_flags[@]}" -ldflags="$3" \
    -o "$partial/$1.tmp" "$4")
}

go_install() {  # name, ldflags, package@version
  local gobin="$partial/.gobin-$1"
  rm -rf "$gobin"
  mkdir -p "$gobin"
  (cd "$partial" && GOBIN="$gobin" GOFLAGS= "${nice_cmd[@]}" "$go" install \
    "${go_flags[@]}" -ldflags="$2" "$3")
  mv "$gobin/$1" "$partial/$1.tmp"
  rm -rf "$gobin"
}

build_one certgen go_build certgen certgen "-s -w" .
build_one etcd go_build etcd etcd "-s -w" .
for cmd in kube-apiserver kube-scheduler kube-controller-manager kubectl; do
  build_one "$cmd" go_build "$cmd" k8s "$k8s_ldflags" "k8s.io/kubernetes/cmd/$cmd"
done
build_one kwok go_install kwok "$kwok_ldflags" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
build_one helm go_install helm "$helm_ldflags" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"

for b in "${binaries[@]}"; do
  [[ -x "$partial/$b" ]] || { echo "build.sh: $b missing after build" >&2; exit 1; }
done
cat > "$partial/VERSIONS" <<EOF
kubernetes $K8S_VERSION
etcd $ETCD_VERSION
kwok $KWOK_VERSION
helm $HELM_VERSION
go $("$go" env GOVERSION)
EOF
touch "$partial/.complete"
rm -rf "$bin"
mv "$partial" "$bin"
prune_superseded "$dest" "k8s-*"
echo "build.sh: built $key in $(( $(date +%s) - start ))s ($(du -sh "$bin" | cut -f1))" >&2
echo "$bin"
