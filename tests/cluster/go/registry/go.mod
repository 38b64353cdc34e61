module github.com/surreal-kube/surreal-kube/tests/cluster/go/registry

// A loopback OCI registry for the tests of `create`'s image check and
// `build --push` (../../README.md, "Add-ons"): go-containerregistry's
// pkg/registry behind our own main.

go 1.26.0

require github.com/google/go-containerregistry v0.22.1
