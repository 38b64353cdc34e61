"""The `Experiment` operator (kopf): reconciles `Experiment` objects into running experiments.

- `handlers`: the kopf handlers (small module-level functions, each with an explicit id),
  registered by `register()` with the settings of this run;
- `reconcile`: what the handlers do: resolve, render with the same renderer as the CLI, apply,
  prune, recreate what disappeared, count failures, and compute and write the status;
- `rbac`: the least-privilege rules the operator needs (the Helm chart grants exactly these);
- `main`: `python -m surreal_kube.operator --namespace NS ...`.
"""
