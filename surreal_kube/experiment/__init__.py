"""The experiment: its spec, its name rules and its process graph (topology)."""
