"""The user's own code on a real node (issue 12): a throwaway package outside this repository with
its own gymnasium environment, surreal-kube installed there from a wheel of this checkout;
`surreal-kube build` in that folder makes the user's image on top of the runtime image and loads it
into the node, and `create` runs the user's environment there to the end of its budget.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.cli.user_project import build_user_image, installed_from, make_user_setup
from tests.e2e.support import MARKS, SMALL_RESOURCES, E2ECluster, RunFailedError, wait_for
from tests.launch.kube.engine import BASE_IMAGE, Engine

pytestmark = MARKS

NAME = "exp-user"


def test_build_and_create_run_the_users_environment(
    e2e: E2ECluster, e2e_engine: Engine, tmp_path: Path
) -> None:
    setup = make_user_setup(tmp_path / "user")
    assert installed_from(setup) != Path(__file__).resolve().parents[2] / "surreal_kube"
    rows = build_user_image(
        setup,
        e2e_engine.url,
        "--load",
        "--containerd-address",
        str(e2e.node.containerd_address),
        "--ctr",
        str(e2e.node.ctr),
        base_image=BASE_IMAGE,
        name=NAME,
    )
    image, state = rows["cpu"]
    assert state == "loaded" and "surreal-kube-cpu" in image, rows

    spec = tmp_path / "small.yaml"
    spec.write_text(SMALL_RESOURCES)
    kube = {"KUBECONFIG": str(e2e.cp.kubeconfig)}

    def sk(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        done = setup.run(*args, timeout=timeout, extra=kube)
        assert done.returncode == 0, f"{args}: {done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        return done

    sk(
        "create", NAME, "-a", "ppo", "-e", setup.env_id,
        "--num-agents", "1", "--num-evals", "1", "--max-env-steps", "3000",
        "-f", str(spec), "--image", f"cpu={image}", "--timeout", "900",
        timeout=960,
    )  # fmt: skip

    def row() -> dict | None:
        rows = json.loads(sk("list", "-o", "json").stdout)
        found = next((r for r in rows if r["name"] == NAME), None)
        if found and found["phase"] == "Failed":
            raise RunFailedError(sk("status", NAME).stdout)
        return found

    done = wait_for(
        "the user's experiment to end",
        lambda: (r := row()) and r["phase"] == "Succeeded" and r,
        timeout=1200,
        every=5,
    )
    assert done["phase"] == "Succeeded"
    out = tmp_path / "results"
    sk("results", NAME, "-o", str(out))
    summary = json.loads((out / "summary.json").read_text())
    # Tiny-v0 pays 1 per step for action 1 over 20 steps: a policy's return says it ran there
    assert 0 <= summary["final_return"] <= 20, summary
    sk("delete", NAME, "--wait", "--delete-data", timeout=360)
