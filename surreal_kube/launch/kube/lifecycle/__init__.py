"""An experiment by name on a cluster: create, find, observe, wait, scale and delete it; apply
its objects; logs and exec."""
