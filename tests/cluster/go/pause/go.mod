module github.com/surreal-kube/surreal-kube/tests/cluster/go/pause

// The pod sandbox ("pause") process of the real test node's pause image
// (../../README.md): standard library only.

go 1.26.0
