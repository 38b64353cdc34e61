"""The Kubernetes backend: from an experiment to cluster objects, and their life on the cluster.

Rendering, placement and images:
- `render`: Jinja templates (`templates/`, one per kind) -> plain object dicts, deterministic;
  `naming` derives every name and label, `ownership` makes one root object own the rest;
- `profile` and `placement`: node pools (a profile file or the live nodes) and the pre-flight
  check that every component fits; `gpus` shares a pod's GPUs out among its containers;
- `images` and `buildcontext`: which images to build, content-hash tags, builds and pushes
  through the docker SDK.

Life cycle (the `create`/`status`/`delete` verbs and the operator): `client`, `apply`, `status`
and the modules beside them.

Nothing here imports the `kubernetes` or `docker` packages at module level, so `--help` stays fast.
"""
