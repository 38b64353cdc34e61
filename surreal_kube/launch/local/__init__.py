"""The local backend: every process of an experiment on this machine, supervised."""
