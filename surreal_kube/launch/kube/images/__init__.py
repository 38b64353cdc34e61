"""Which images an experiment runs, their content-hash tags, building, loading."""
