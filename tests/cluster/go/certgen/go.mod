module github.com/surreal-kube/surreal-kube/tests/cluster/go/certgen

// Writes the test cluster's certificates and keys (standard library only).

go 1.26.0
