"""The `Experiment` operator (kopf): reconciles `Experiment` objects into running experiments.

- `handlers`: the kopf handlers (small module-level functions, each with an explicit id),
  registered by `register()` with the settings of this run;
- `apply`: what the handlers apply: the plan of an Experiment (the same as the CLI's), applied,
  pruned, and what disappeared recreated;
- `status`: what is written to an Experiment's status: conditions, failures counted, the restart
  budget, the status computed from the pods;
- `loops`: the background threads: the status refresher and the periodic resync;
- `config`: the settings of one run, which all of them read;
- `rbac`: the least-privilege rules the operator needs (the Helm chart grants exactly these);
- `main`: `surreal-kube-operator --namespace NS ...`: wires the settings, watches, loops and
  handlers together.
"""
