# The test Kubernetes control plane (tests/cluster/README.md). Included by the main Makefile.
#
#   make controlplane   build the pinned binaries into ~/.cache/surreal-kube/controlplane (or reuse)
#   make node           build the real node's binaries into ~/.cache/surreal-kube/node (or reuse)
#   make cluster-up     start a shared cluster on 127.0.0.1 with the real node (reused by tests)
#   make cluster-down   stop it, leaving no process, port, mount or network namespace behind
#   make cluster-env    print `export KUBECONFIG=... PATH=...` for: eval "$(make -s cluster-env)"
#   make cluster-addons build the add-ons (Karpenter's kwok autoscaler, Kueue, kube-router's
#                       NetworkPolicy firewall, a loopback OCI registry) into
#                       ~/.cache/surreal-kube/addons (or reuse)
#   make cluster-builds all three, then drop Go's build cache they shared (go-cache.sh)

PYTHON ?= .venv/bin/python
CLUSTER_DIR := tests/cluster

.PHONY: controlplane node cluster-up cluster-down cluster-env cluster-addons cluster-builds

# kube-router's firewall (tests/cluster/netpol.py) runs Debian's ipset; `make deb` installs it.
DEB_PACKAGES += ipset

controlplane:
	@bash $(CLUSTER_DIR)/build.sh >/dev/null

# After the control plane: kubelet and kube-proxy reuse Go's build cache that it filled.
node: controlplane
	@bash $(CLUSTER_DIR)/build-node.sh >/dev/null

# After the control plane (the Go toolchain it may have fetched), one add-on at a time.
cluster-addons: controlplane
	@bash $(CLUSTER_DIR)/build-addons.sh karpenter kube-router kueue registry >/dev/null

# The builds' Go cache (about 18 GB) would serve only the next build of a changed key.
cluster-builds: node cluster-addons
	@bash $(CLUSTER_DIR)/go-cache.sh drop

# $(STAMP) is the main Makefile's "venv installed" file, when it defines one.
cluster-up: controlplane node $(STAMP)
	@bash $(CLUSTER_DIR)/go-cache.sh drop
	$(PYTHON) -m tests.cluster.controlplane up --real-node

cluster-down:
	$(PYTHON) -m tests.cluster.controlplane down

cluster-env:
	@$(PYTHON) -m tests.cluster.controlplane env
