"""Talking to the API server: the client, credentials, what we keep of pods and nodes, watches,
port-forward."""
