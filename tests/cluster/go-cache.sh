# Where the test cluster's Go builds keep Go's build cache, and how their outputs are kept few.
#
#   source go-cache.sh            (build.sh, build-node.sh, build-addons.sh), then use_go_cache
#                                 before a build and prune_superseded after it or on reuse
#   bash go-cache.sh drop         (make, once the control plane, node and add-ons are built)
#
# The three builds fill about 18 GB of build cache, and a change of go-env.sh's flags fills as
# much again beside it (Go trims entries only after five days unused): CI's warm machine ran out
# of disk that way, and its real node reported DiskPressure. So the builds use a cache of their
# own, ~/.cache/surreal-kube/go-build (or $SURREAL_KUBE_GOCACHE): the node and the add-ons reuse
# the packages the control plane compiled into it, and `drop` deletes it once all are built, for
# it would serve only the next build of a changed key. The user's own Go cache is left alone.
# Builds hold a shared lock on it; `drop` deletes nothing while one runs.
#
# Where the cache is does not change the bytes built, so this file is in no cache key.

go_cache=${SURREAL_KUBE_GOCACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/surreal-kube/go-build}

# A build directory superseded by a new key is deleted once the new one is complete, unless a
# build of it is running (its lock is held): one set of binaries per family is kept.
prune_superseded() {  # the new build's directory, then a glob of its family's directories
  local dest=$1 family=$2 old
  for old in "$(dirname "$dest")"/$family; do
    [[ -d "$old" && "$old" != "$dest" && -e "$old/.lock" ]] || continue
    if (exec 8>"$old/.lock" && flock -n 8 && rm -rf "$old"); then
      echo "${0##*/}: removed the superseded build $(basename "$old")" >&2
    fi
  done
}

use_go_cache() {  # for the rest of the calling script
  mkdir -p "$go_cache"
  exec 7>"$go_cache.lock"
  flock -s 7
  export GOCACHE=$go_cache
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  set -euo pipefail
  [[ "${1:-}" == drop ]] || { echo "usage: go-cache.sh drop" >&2; exit 2; }
  [[ -d "$go_cache" ]] || exit 0
  exec 7>"$go_cache.lock"
  if flock -n 7; then
    size=$(du -sh "$go_cache" | cut -f1)
    rm -rf "$go_cache"
    echo "go-cache.sh: dropped the builds' Go cache ($size)" >&2
  else
    echo "go-cache.sh: a build is using $go_cache; kept" >&2
  fi
fi
