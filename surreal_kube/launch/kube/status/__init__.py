"""What the cluster says about an experiment: its pods summarized, its progress record."""
