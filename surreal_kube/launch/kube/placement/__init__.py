"""Where each workload runs: node pools, the fit of a pod on a node, the volume pre-flight."""
