"""Backends that turn an experiment's topology into running processes.

`local/` starts every process on this machine; `kube/` renders Kubernetes objects, places them on
node pools and builds the images they run. Backends start roles as commands
(`surreal-kube-role <role>`) and never import `surreal_kube.runtime`, so the CLI stays light.
"""
