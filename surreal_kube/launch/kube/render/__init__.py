"""Kubernetes objects from the topology: Jinja templates, the CRD, GPUs per container, ownership."""
