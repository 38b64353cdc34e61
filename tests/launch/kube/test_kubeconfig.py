"""Credentials read as kubectl reads them (launch/kube/api/kubeconfig.py), without a server.

The real API server's side (client certificates, tokens, exec plugins answered by it, a 401 that
runs the plugin again) is in test_kubeconfig_cluster.py; here: merging, paths, the choice of
context and identity, the exec protocol, and the errors a person sees.
"""

from __future__ import annotations

import base64
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from surreal_kube.launch.kube.api import kubeconfig as kc
from surreal_kube.launch.kube.api.client import Kube, KubeError


def write(path: Path, doc: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc))
    return path


def config(
    context: str, cluster: dict, user: dict, *, namespace: str | None = None, current: bool = True
) -> dict:
    ctx: dict = {"cluster": f"{context}-cluster", "user": f"{context}-user"}
    if namespace:
        ctx["namespace"] = namespace
    doc: dict = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": f"{context}-cluster", "cluster": cluster}],
        "users": [{"name": f"{context}-user", "user": user}],
        "contexts": [{"name": context, "context": ctx}],
    }
    if current:
        doc["current-context"] = context
    return doc


def test_kubeconfig_list_merges_as_kubectl_first_file_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = write(
        tmp_path / "a", config("one", {"server": "https://a:1/"}, {"token": "ta"}, namespace="ns-a")
    )
    b_doc = config("two", {"server": "https://b:2"}, {"token": "tb"})
    b_doc["clusters"].append({"name": "one-cluster", "cluster": {"server": "https://shadowed:9"}})
    b = write(tmp_path / "b", b_doc)
    monkeypatch.setenv("KUBECONFIG", f"{a}{os.pathsep}{tmp_path / 'missing'}{os.pathsep}{b}")
    merged = kc.load_config()
    assert merged.current == "one" and merged.sources == [a, b]
    assert merged.context_names() == ["one", "two"]
    one = kc.credentials()
    assert (one.server, one.context, one.namespace) == ("https://a:1", "one", "ns-a")
    assert one.authorization() == "Bearer ta"
    two = kc.credentials(context="two")
    assert (two.server, two.namespace, two.authorization()) == ("https://b:2", None, "Bearer tb")


def test_relative_paths_resolve_against_the_file_that_names_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "conf"
    (folder / "pki").mkdir(parents=True)
    (folder / "pki" / "ca.pem").write_bytes(b"CA")
    (folder / "pki" / "me.crt").write_bytes(b"CERT")
    (folder / "pki" / "me.key").write_bytes(b"KEY")
    (folder / "token").write_text("file-token\n")
    doc = config(
        "c",
        {"server": "https://x:6443", "certificate-authority": "pki/ca.pem", "tls-server-name": "k"},
        {"client-certificate": "pki/me.crt", "client-key": "pki/me.key", "tokenFile": "token"},
    )
    path = write(folder / "kubeconfig", doc)
    monkeypatch.chdir(tmp_path)  # not the file's folder
    creds = kc.credentials(path)
    assert (creds.ca_pem, creds.cert_pem, creds.key_pem) == (b"CA", b"CERT", b"KEY")
    assert creds.tls_server_name == "k" and creds.verify
    assert creds.authorization() == "Bearer file-token"


def test_a_rotated_token_file_is_read_again(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first")
    path = write(tmp_path / "k", config("c", {"server": "https://x"}, {"tokenFile": str(token)}))
    creds = kc.credentials(path)
    assert creds.authorization() == "Bearer first"
    token.write_text("second")
    os.utime(token, (1, 1))  # a new modification time, as the kubelet's rename gives
    assert creds.authorization() == "Bearer second"


def test_data_fields_win_and_basic_auth_and_insecure(tmp_path: Path) -> None:
    b64 = lambda data: base64.b64encode(data).decode()  # noqa: E731
    doc = config(
        "c",
        {
            "server": "https://x",
            "certificate-authority-data": b64(b"CA-DATA"),
            "certificate-authority": "/nonexistent",
            "insecure-skip-tls-verify": True,
            "proxy-url": "http://127.0.0.1:3128",
        },
        {"username": "ann", "password": "s3cret"},
    )
    creds = kc.credentials(write(tmp_path / "k", doc))
    assert creds.ca_pem == b"CA-DATA" and not creds.verify
    assert creds.proxy == "http://127.0.0.1:3128"
    assert creds.authorization() == "Basic " + b64(b"ann:s3cret")


@pytest.mark.parametrize(
    ("doc", "context", "message"),
    [
        (config("c", {"server": "https://x"}, {}, current=False), None, "no current context"),
        (config("c", {"server": "https://x"}, {}), "nope", "no context named 'nope' (contexts: c)"),
        (config("c", {}, {}), None, "cluster 'c-cluster': no server address"),
        (
            config("c", {"server": "https://x"}, {"client-certificate-data": "Q0VSVA=="}),
            None,
            "a client certificate needs its key too",
        ),
        (
            config("c", {"server": "https://x"}, {"exec": {"command": "x", "apiVersion": "v0"}}),
            None,
            "apiVersion 'v0' is not supported",
        ),
        (
            config("c", {"server": "https://x", "certificate-authority": "nope.pem"}, {}),
            None,
            "certificate-authority: cannot read",
        ),
    ],
)
def test_a_broken_kubeconfig_says_what_is_wrong(
    tmp_path: Path, doc: dict, context: str | None, message: str
) -> None:
    path = write(tmp_path / "k", doc)
    with pytest.raises(kc.ConfigError) as err:
        kc.credentials(path, context)
    assert message in str(err.value)
    with pytest.raises(KubeError) as err:  # the same through the client, one line
        Kube(kubeconfig=path, context=context)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_not_a_kubeconfig(tmp_path: Path) -> None:
    path = tmp_path / "k"
    path.write_text("- a list\n")
    with pytest.raises(kc.ConfigError, match="not a kubeconfig"):
        kc.load_config(path)
    with pytest.raises(kc.ConfigError, match="no such file"):
        kc.load_config(tmp_path / "absent")


def plugin(tmp_path: Path, body: str) -> Path:
    """An exec credential plugin: a Python script that counts its runs in a file."""
    script = tmp_path / "plugin.py"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, os, pathlib, sys\n"
        "runs = pathlib.Path(__file__).with_name('runs')\n"
        "n = int(runs.read_text()) + 1 if runs.exists() else 1\n"
        "runs.write_text(str(n))\n"
        "info = json.loads(os.environ['KUBERNETES_EXEC_INFO'])\n" + body
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def runs(tmp_path: Path) -> int:
    return int((tmp_path / "runs").read_text())


def test_exec_plugin_token_cached_until_it_expires(tmp_path: Path) -> None:
    plugin(
        tmp_path,
        "assert info['spec']['interactive'] is False, info\n"
        "assert info['spec']['cluster']['server'] == 'https://x', info\n"
        "assert os.environ['EXTRA'] == 'yes'\n"
        "print(json.dumps({'apiVersion': info['apiVersion'], 'kind': 'ExecCredential',\n"
        "  'status': {'token': f'tok-{n}', 'expirationTimestamp': sys.argv[1]}}))\n",
    )
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": "./plugin.py",  # relative: to the kubeconfig's folder, as kubectl
            "args": ["2999-01-01T00:00:00Z"],
            "env": [{"name": "EXTRA", "value": "yes"}],
            "interactiveMode": "Never",
            "provideClusterInfo": True,
        }
    }
    creds = kc.credentials(write(tmp_path / "k", config("c", {"server": "https://x"}, user)))
    assert creds.authorization() == "Bearer tok-1"
    assert creds.authorization() == "Bearer tok-1" and runs(tmp_path) == 1
    assert creds.unauthorized()  # a 401: the plugin runs again
    assert creds.authorization() == "Bearer tok-2"
    user["exec"]["args"] = ["2000-01-01T00:00:00Z"]  # already expired: run at every use
    creds = kc.credentials(write(tmp_path / "k", config("c", {"server": "https://x"}, user)))
    assert creds.authorization() == "Bearer tok-3"
    assert creds.authorization() == "Bearer tok-4"


def test_exec_plugin_client_certificate(tmp_path: Path) -> None:
    plugin(
        tmp_path,
        "print(json.dumps({'apiVersion': info['apiVersion'], 'kind': 'ExecCredential',\n"
        "  'status': {'clientCertificateData': 'C', 'clientKeyData': 'K'}}))\n",
    )
    user = {
        "exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": "./plugin.py"}
    }
    creds = kc.credentials(write(tmp_path / "k", config("c", {"server": "https://x"}, user)))
    assert creds.client_certificate() == (b"C", b"K")
    assert creds.authorization() is None


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("sys.stderr.write('login expired\\nrun gcloud auth login\\n'); sys.exit(3)\n",
         "exited 3: run gcloud auth login"),
        ("print('not json')\n", "its output is not JSON"),
        ("print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1beta1', "
         "'kind': 'ExecCredential', 'status': {'token': 't'}}))\n", "it answered"),
        ("print(json.dumps({'apiVersion': info['apiVersion'], 'kind': 'ExecCredential', "
         "'status': {}}))\n", "neither a token nor a client certificate"),
    ],
)  # fmt: skip
def test_a_failing_exec_plugin_is_one_clear_error(tmp_path: Path, body: str, message: str) -> None:
    plugin(tmp_path, body)
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "./plugin.py"}}
    path = write(tmp_path / "k", config("c", {"server": "https://127.0.0.1:9"}, user))
    kube = Kube(kubeconfig=path)  # the plugin runs at the first request, not before
    with pytest.raises(KubeError) as err:
        kube.raw("GET", "/version", what="reach the API server")
    assert message in str(err.value)
    assert str(err.value).startswith("reach the API server: exec plugin ./plugin.py")


def test_in_cluster_when_no_kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("pod-token")
    (sa / "ca.crt").write_bytes(b"POD-CA")
    (sa / "namespace").write_text("team-a\n")
    monkeypatch.setattr(kc, "SERVICE_ACCOUNT_DIR", sa)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "6443")
    creds = kc.credentials()
    assert (creds.server, creds.context, creds.namespace) == (
        "https://[fd00::1]:6443",
        "in-cluster",
        "team-a",
    )
    assert creds.ca_pem == b"POD-CA" and creds.authorization() == "Bearer pod-token"
    assert creds.in_cluster
    # a kubeconfig present wins, as for kubectl, even with a context named like the pod's
    write(tmp_path / ".kube" / "config", config("in-cluster", {"server": "https://x"}, {}))
    from_file = kc.credentials()
    assert from_file.context == "in-cluster" and not from_file.in_cluster


def test_the_cli_does_not_import_the_official_client(tmp_path: Path) -> None:
    """The point of kubeconfig.py: a cluster verb pays no import of the `kubernetes` package
    (0.3-0.5 s on a busy 2-core machine) before its first request."""
    path = write(tmp_path / "k", config("c", {"server": "https://127.0.0.1:9"}, {"token": "t"}))
    probe = (
        "import sys\n"
        "from surreal_kube.cli.main import run\n"
        "sys.argv = ['surreal-kube', 'status', 'exp', '--kubeconfig', sys.argv[1]]\n"
        "try:\n    run()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes'))\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", probe, str(path)], capture_output=True, text=True, timeout=60
    )
    assert res.stdout.strip().splitlines()[-1] == "[]", res.stdout + res.stderr
    assert "The connection to the server 127.0.0.1:9 was refused" in res.stderr
