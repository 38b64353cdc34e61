"""A role whose named worker thread's socket fails: `python -m tests.runtime.faulty_role ROLE`.

`FAULT_THREAD` names the thread (the learner's are `prefetcher` and `param-publisher`, the names
`comm.sampling.Prefetcher` and `comm.parameters.ParameterPublisher` give them). From the moment
the file `FAULT_TRIGGER` exists (at once if it is not set), every `zmq.Poller.poll` that thread
makes raises `ENOTSOCK`, what a socket closed under a thread raises: the thread's work ends by a
real ZeroMQ error, the rest of the process runs as it would. Everything else is the real role
entry point (`surreal_kube.runtime.main`).
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

import zmq

THREAD = os.environ["FAULT_THREAD"]
TRIGGER = os.environ.get("FAULT_TRIGGER")
_poll = zmq.Poller.poll


def _failing_poll(self: zmq.Poller, timeout: Any = None) -> Any:
    if threading.current_thread().name == THREAD and (TRIGGER is None or os.path.exists(TRIGGER)):
        raise zmq.ZMQError(zmq.ENOTSOCK)
    return _poll(self, timeout)


zmq.Poller.poll = _failing_poll  # type: ignore[method-assign]

if __name__ == "__main__":
    from surreal_kube.runtime.main import run

    sys.argv = ["surreal-kube-role", *sys.argv[1:]]
    run()
