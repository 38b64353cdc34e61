"""Learning core: algorithms, models, filters, replay buffers, schedules.

Their hyper-parameters live with the spec (`surreal_kube.experiment.algorithms`), torch-free.
"""
