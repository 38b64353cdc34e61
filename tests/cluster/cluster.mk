# The test Kubernetes control plane (tests/cluster/README.md). Included by the main Makefile.
#
#   make controlplane   build the pinned binaries into ~/.cache/surreal-kube/controlplane (or reuse)
#   make cluster-up     start a shared cluster on 127.0.0.1 (reused by the cluster tests)
#   make cluster-down   stop it, leaving no process or port behind
#   make cluster-env    print `export KUBECONFIG=... PATH=...` for: eval "$(make -s cluster-env)"

PYTHON ?= .venv/bin/python
CLUSTER_DIR := tests/cluster

.PHONY: controlplane cluster-up cluster-down cluster-env

controlplane:
	@bash $(CLUSTER_DIR)/build.sh >/dev/null

# $(STAMP) is the main Makefile's "venv installed" file, when it defines one.
cluster-up: controlplane $(STAMP)
	$(PYTHON) -m tests.cluster.controlplane up

cluster-down:
	$(PYTHON) -m tests.cluster.controlplane down

cluster-env:
	@$(PYTHON) -m tests.cluster.controlplane env
