"""The `surreal-kube` command line: one module per verb, registered on one root app."""
