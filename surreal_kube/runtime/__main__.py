"""`python -m surreal_kube.runtime <role> [--id N]`, the same as `surreal-kube-role`."""

from surreal_kube.runtime.main import run

run()
