"""The comm layer: ZeroMQ sockets, the wire format and the message paths of an experiment.

- `wire`: msgpack header + raw numpy frames; strict decoding; reject counting. No pickle.
- `parameters`: learner publish (PUB), parameter-server shards (SUB + REP), fetch by hash.
- `experience`: agents' stacked, never-blocking sender; replay shards' receiver.
- `sampling`: the replay sampling broker (credit-based balancing), shard side, learner prefetch.
- `proxy`: C-level forwarders (replay collector, parameter-server front), stoppable.
- `metrics`: fire-and-forget scalars to tensorplex and log records to loggerplex.

This package imports nothing of surreal_kube above it (only `surreal_kube.errors`).
"""
