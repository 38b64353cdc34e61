"""The Kubernetes backend: from an experiment to cluster objects.

- `render`: Jinja templates -> plain object dicts (`render_experiment`), deterministic.
- `placement`: node pools (from a `profile` file or the live cluster) and the pre-flight fit check.
- `images`: which images to build, content-hash tags, builds and pushes through the docker SDK.

Nothing here imports the `kubernetes` or `docker` packages at module level, so `--help` stays fast.
"""
