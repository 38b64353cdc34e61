"""What runs inside each process or pod: one entry per role (`surreal-kube-role <role>`).

Roles read their identity and addresses from the environment (`context`), log in one format
(`logs`), report throughput to tensorplex (`base`), write progress files (`status`) and stop
cleanly on SIGTERM (`lifecycle`). Only the role entry point (`main`) imports this package.
"""
