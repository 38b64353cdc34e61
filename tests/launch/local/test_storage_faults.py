"""A whole local run on a real small tmpfs: a corrupt newest checkpoint, then the disk filled
mid-run and freed again. The learner resumes from the older checkpoint, every role lives through
the full disk (the learner skips its saves and counts them), and the run ends Succeeded with its
results; what it wrote is closed to other users.

Before the fixes: the learner failed on the corrupt file at every restart until the run Failed;
the first save on the full disk ended the learner, the first event file write tensorplex, the
first state file write the supervisor.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from surreal_kube.comm.parameters import ParameterClient
from surreal_kube.launch.local.backend import pid_alive
from surreal_kube.launch.local.progress import read_progress
from tests.launch.local.test_local_experiment import SMALL, sk, state_of, status_of, wait_for
from tests.launch.local.test_permissions import open_to_others
from tests.session.tmpfs import fill, free, small_tmpfs

pytestmark = pytest.mark.slow

PERIOD = 5
"""session.checkpoint.period in SMALL: a save is due every 5 learner iterations."""


def checkpoints(folder: Path) -> list[int]:
    return sorted(
        int(p.name.split(".")[1]) for p in (folder / "checkpoints").glob("learner.*.ckpt")
    )


def published_iteration(client: ParameterClient) -> int:
    client.fetch()
    return client.info.iteration if client.info else -1


def test_a_run_survives_a_corrupt_checkpoint_and_a_full_disk(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "exps", "128m") as root:
        folder = root / "exp-disk"
        # no env-step budget: how many learner iterations a budget buys depends on the machine
        # (a fast agent spends 4,000 steps in fewer iterations), so the first run is stopped once
        # it has kept two checkpoints, which is what the rest needs
        res = sk("create", "exp-disk", "--local", "--detach", *SMALL, root=root)
        assert res.returncode == 0, res.stderr
        try:
            wait_for("two checkpoints", lambda: len(checkpoints(folder)) >= 2, timeout=400)
            res = sk("delete", "exp-disk", "--keep-files", root=root)
            assert res.returncode == 0, res.stderr
            kept = checkpoints(folder)
            assert len(kept) >= 2, kept
            newest = folder / "checkpoints" / f"learner.{kept[-1]}.ckpt"
            newest.write_bytes(newest.read_bytes()[:300])  # torn, as a dying disk leaves it

            # what the agents recorded, which the resumed ones take as theirs: the state file's
            # count was read before their last progress write and could be behind by more than
            # the new allowance (the resumed agents were then done at once, the learner starved)
            taken = read_progress(folder / "status").env_steps
            first_supervisor = state_of(folder).get("supervisor_pid")
            budget = taken + 30_000
            res = sk("create", "exp-disk", "--local", "--detach", "--resume",
                     "--max-env-steps", str(budget), root=root)  # fmt: skip
            assert res.returncode == 0, res.stderr

            def resumed_at() -> int | None:
                log = folder / "logs" / "learner.log"
                found = re.findall(r"resumed from learner\.(\d+)\.ckpt", log.read_text())
                return int(found[-1]) if found else None

            assert wait_for("the learner to resume", resumed_at) == kept[-2]
            assert (folder / "checkpoints" / f"learner.{kept[-1]}.ckpt.corrupt").is_file()

            def resumed_state() -> dict | None:
                state = state_of(folder)
                procs = state.get("processes", {}).values()
                started = procs and all(p.get("pid") for p in procs)
                return state if started and state["supervisor_pid"] != first_supervisor else None

            state = wait_for("every process of the resumed run started", resumed_state)
            # the run's sockets are Unix sockets in its private folder: this process is its user's
            client = ParameterClient(state["addresses"]["ps-serve"], timeout=2.0)
            try:
                start = wait_for("published parameters", lambda: published_iteration(client) + 1)
                fill(root)
                full_at = published_iteration(client)
                # the learner goes on learning on the full disk: its saves were due (and skipped)
                wait_for("the learner iterating on the full disk",
                         lambda: published_iteration(client) >= full_at + 2 * PERIOD)  # fmt: skip
                assert start >= 0
                pids = {n: p["pid"] for n, p in state["processes"].items()}
                assert pid_alive(state["supervisor_pid"])
                for name in ("learner", "tensorplex", "loggerplex", "replay", "agents-0"):
                    assert pid_alive(pids[name]), f"{name} died on the full disk"
            finally:
                client.close()
                free(root)
            wait_for("the skipped saves counted", lambda: (
                status_of(folder, "learner").get("extra", {}).get("checkpoint", {})
                .get("skipped_saves", 0) >= 1))  # fmt: skip
            wait_for("the resumed run to finish",
                     lambda: state_of(folder).get("phase") == "Succeeded", timeout=600)  # fmt: skip
        finally:
            sk("delete", "exp-disk", "--keep-files", root=root)

        state = state_of(folder)
        assert state["phase"] == "Succeeded", state.get("reason")
        assert state["reason"] == f"reached {budget} env steps"
        # nothing restart-looped: the learner and tensorplex lived through it all
        assert state["processes"]["learner"]["restarts"] == 0
        assert state["processes"]["tensorplex"]["restarts"] == 0
        assert checkpoints(folder)[-1] > full_at  # checkpoints written again once space was back
        summary = json.loads((folder / "results" / "summary.json").read_text())
        assert summary["phase"] == "Succeeded" and summary["env_steps"] == budget
        assert (folder / "results" / "learning_curve.png").stat().st_size > 5000
        assert not any(pid_alive(p["pid"]) for p in state["processes"].values() if p.get("pid"))
        # everything the run wrote (logs, events, checkpoints, state) is its owner's alone
        assert open_to_others(folder) == []
        restarts = {n: p["restarts"] for n, p in state["processes"].items() if p["restarts"]}
        print("restarts in the resumed run:", restarts)
