"""A learner that a fake replay shard cannot crash or inflate (a real learner process).

The test plays the replay load balancer: it binds the sampler the learner's prefetcher connects
to, and answers the learner's requests, first as a stranger would (a batch of its own layout,
stats claiming 10**15 env steps), then with a batch of this experiment's items.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import zmq

from surreal_kube.comm import wire
from surreal_kube.comm.sockets import make_socket
from surreal_kube.envs import env_spaces
from surreal_kube.launch.local.folder import read_json
from surreal_kube.runtime.layout import item_layout

pytestmark = pytest.mark.slow

BATCH = 16


def _request(sampler: zmq.Socket, learner) -> tuple[bytes, dict]:
    """The learner's next sample request: (its identity, the request's meta)."""
    deadline = time.monotonic() + 120
    while not sampler.poll(200):
        assert learner.poll() is None, f"the learner exited with {learner.returncode}"
        assert time.monotonic() < deadline, "the learner never asked for a batch"
    client, *frames = sampler.recv_multipart()
    return client, wire.decode(frames, expect=(wire.SAMPLE,)).meta


def test_a_forged_batch_is_dropped_and_counted_and_the_learner_learns_on(local_run) -> None:
    """Before: the forged batch went into `learn()`, whose KeyError ended the learner (exit 1,
    a restart each time a stranger answered), and its stats set the global env steps."""
    run = local_run({"algorithm": {"batchSize": BATCH}, "session": {"metrics": {
        "learnerIntervalSeconds": 1}}})  # fmt: skip
    sampler = make_socket(zmq.ROUTER, bind=run.addresses["replay-sampler"].bind)
    try:
        learner = run.start("learner")
        forged = {
            "obs": np.zeros((BATCH, 3), np.float32),
            "param_version": np.zeros(BATCH, np.int64),
        }
        stats = {"steps": 10**15, "ins": 10**15}
        for arrays, meta in (
            (forged, {"n": BATCH}),
            ({}, {"n": BATCH}),  # no items at all
            (forged, {"n": "many"}),
        ):
            client, request = _request(sampler, learner)
            header = {"id": request["id"], "shard": 0, "stats": stats, **meta}
            sampler.send_multipart([client, *wire.encode(wire.BATCH, header, arrays)])
        spec = run.exp.spec
        real = item_layout(spec, *env_spaces(spec.env)).example(BATCH, 1)
        real["param_version"][:] = real["step_version"][:] = 0
        for _ in range(3):
            client, request = _request(sampler, learner)
            header = {"id": request["id"], "shard": 0, "n": BATCH, "stats": {"steps": 320}}
            sampler.send_multipart([client, *wire.encode(wire.BATCH, header, real)])
        _request(sampler, learner)  # asked again after learning: alive and iterating

        def status() -> dict:
            return read_json(run.dir / "status" / "learner.json") or {}

        deadline = time.monotonic() + 60
        while status().get("extra", {}).get("batches_rejected", 0) < 3:
            assert learner.poll() is None, run.log_path("learner").read_text()
            assert time.monotonic() < deadline, status()
            time.sleep(0.1)
        final = status()
        assert final["iteration"] >= 1
        assert final["extra"]["global_env_steps"] == 320  # the forged stats were not read
        assert learner.poll() is None
    finally:
        sampler.close(0)
    assert run.terminate("learner")[0] == 0
    log = run.log_path("learner").read_text()
    assert "dropped a batch that is not of this experiment" in log
