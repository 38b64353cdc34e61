"""One log format for every role, to stderr and to loggerplex.

    2025-06-01 12:00:00,123 INFO agents-3 surreal_kube.runtime.agent: message

stderr is what `kubectl logs` and the local backend's log files show; loggerplex gathers the same
lines into one file per component under the experiment folder.
"""

from __future__ import annotations

import logging
import os
import sys

from surreal_kube.comm.metrics import LogForwarder

FORMAT = "%(asctime)s %(levelname)s {process} %(name)s: %(message)s"


def setup_logging(process: str, loggerplex_addr: str | None = None) -> LogForwarder | None:
    """Configure the root logger for a role; forward to loggerplex when it has an address.

    The level comes from SURREAL_LOG_LEVEL (default INFO).
    """
    level = getattr(logging, os.environ.get("SURREAL_LOG_LEVEL", "INFO").upper(), logging.INFO)
    formatter = logging.Formatter(FORMAT.format(process=process))
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setFormatter(formatter)
    root.addHandler(stderr)
    root.setLevel(level)
    forwarder = None
    if loggerplex_addr:
        forwarder = LogForwarder(loggerplex_addr, process, level=level)
        forwarder.setFormatter(formatter)
        root.addHandler(forwarder)
    return forwarder
