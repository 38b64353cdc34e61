"""Agents and evaluators that a fake parameter server cannot crash (real role processes).

The test plays the parameter server: it binds `ps-serve` and answers the role's fetches with
parameters whose content hash matches, but whose names and shapes are not the model's. The
hash is no signature (anyone can compute it), so the role must check what it loads.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import zmq

from surreal_kube.comm import seal, wire
from surreal_kube.comm.parameters import content_hash
from surreal_kube.comm.sockets import make_socket

pytestmark = pytest.mark.slow

FORGED = [
    {"model/pi.weight": np.zeros((2, 2), np.float32)},  # names the model does not have
    {"model/nothing": np.ones(3, np.float64), "z_filter/mean": np.zeros(7)},
]


@pytest.mark.parametrize("process", ["agents-0", "evals-0"])
def test_parameters_of_another_model_are_dropped_and_counted(local_run, process: str) -> None:
    """Before: `load_parameters` raised (ValueError, or torch's size mismatch) and the role
    exited 1, again at each restart while the peer stayed; and the client already held the
    forged iteration as its version."""
    # an evaluator fetches once per snapshot: one a second, not one every default 10 s
    run = local_run({"evals": {"count": 1, "intervalSeconds": 1}})
    server = make_socket(zmq.REP, bind=run.addresses["ps-serve"].bind, sealed=True)
    opener = seal.Opener(fresh=True)  # a peer of the experiment's: sealed, if keys
    try:
        role = run.start(process)
        for n, params in enumerate(FORGED * 2):
            deadline = time.monotonic() + 120
            while not server.poll(200):
                assert role.poll() is None, run.log_path(process).read_text()
                assert time.monotonic() < deadline, "the role never fetched"
            server.recv_multipart()
            meta = {"iteration": 10**9 + n, "hash": content_hash(params), "time": time.time()}
            server.send_multipart(seal.seal(wire.encode(wire.PARAMS, meta, params)))
        # it fetches again: alive, and still without parameters (it holds no forged version)
        deadline = time.monotonic() + 120
        while not server.poll(200):
            assert role.poll() is None, run.log_path(process).read_text()
            assert time.monotonic() < deadline, "the role never fetched again"
        fetch = wire.decode(opener.open(server.recv_multipart()), expect=(wire.FETCH,))
        assert fetch.meta.get("hash") is None
        server.send_multipart(seal.seal(wire.encode(wire.NO_PARAMS)))
    finally:
        server.close(0)
    assert run.terminate(process)[0] == 0
    assert "bad-params" in run.log_path(process).read_text()
