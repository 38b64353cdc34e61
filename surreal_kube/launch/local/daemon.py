"""`python -m surreal_kube.launch.local.daemon FOLDER`: a detached experiment's supervisor.

`create --detach` starts this in its own session; it reads everything from the folder that
`prepare` wrote (config, the run's sockets and ports) and runs exactly what a foreground
`create` runs.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from surreal_kube.experiment.resolve import load_experiment_file
from surreal_kube.launch.local.folder import ExperimentFolder, read_json
from surreal_kube.launch.local.sockets import Wiring
from surreal_kube.launch.local.supervisor import supervise


def main(argv: list[str]) -> int:
    """Supervise the experiment in folder argv[0] until it ends."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s supervisor: %(message)s"
    )
    folder = ExperimentFolder(Path(argv[0]))
    state = read_json(folder.state) or {}
    exp = load_experiment_file(folder.config)
    sup, picture = supervise(
        exp,
        folder,
        Wiring.from_state(state),
        elapsed_before=float(state.get("elapsed") or 0.0),
    )
    logging.info("%s: %s; learning curve: %s", sup.phase, sup.reason, picture)
    return 0 if sup.phase in ("Succeeded", "Stopped") else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
