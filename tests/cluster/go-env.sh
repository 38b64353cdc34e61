# Sourced by build.sh, build-node.sh and build-addons.sh: how every Go build of the test
# cluster runs. One set of flags, so that Go's build cache is shared between the three.
#
# The binaries are linked with -s -w (no DWARF), so the compiler need not write DWARF either,
# and its collector may run a quarter as often (GOGC=400; 1.6 GB at the peak, on a machine of
# 24 GiB): two cold builds of kube-scheduler each way took 314 and 310 CPU-s against 357 and
# 374 with the defaults (0.88 and 0.83; wall 164 and 162 s against 187 and 194), same 2-core
# machine, same hour. The binaries run the same but are not byte-identical to a build without
# the flag, so this file is part of each build's cache key.
export CGO_ENABLED=0 GOTOOLCHAIN=${GOTOOLCHAIN:-auto} GOGC=${GOGC:-400}
go_flags=(-trimpath -buildvcs=false -gcflags=all=-dwarf=false)
