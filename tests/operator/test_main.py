"""The operator's entry point without a cluster: its console script and a missing extra."""

from __future__ import annotations

import socket
import subprocess
import sys


def test_without_kopf_the_operator_says_which_extra_to_install() -> None:
    code = (
        "import sys; sys.modules['kopf'] = None; "  # as if the `operator` extra was not installed
        "from surreal_kube.operator.main import main; sys.exit(main(['--namespace', 'team-a']))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        "error: the operator needs kopf, which the `operator` extra installs: "
        "pip install 'surreal-kube[operator]'"
    )


def test_the_console_script_is_the_operator() -> None:
    """`surreal-kube-operator` (the chart's command) runs `operator.main:main`, as
    `python -m surreal_kube.operator` does."""
    from importlib.metadata import entry_points

    (script,) = entry_points(group="console_scripts", name="surreal-kube-operator")
    assert script.value == "surreal_kube.operator.main:main"
    done = subprocess.run(
        [sys.executable, "-m", "surreal_kube.operator", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout.startswith("usage: surreal-kube-operator")


KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: team-a}}]
current-context: x
"""


def operator(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "surreal_kube.operator", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_bad_metrics_address_is_one_line_exit_2_before_anything_starts(tmp_path) -> None:
    done = operator("--metrics", "8081")
    assert done.returncode == 2
    assert "'8081' is not HOST:PORT" in done.stderr.strip().splitlines()[-1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        done = operator("--kubeconfig", str(kubeconfig), "--metrics", address)
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: --metrics {address}: cannot listen there"), done.stderr
