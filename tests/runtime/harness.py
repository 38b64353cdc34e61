"""Start real role processes the way a backend does: topology environment, free 127.0.0.1 ports."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from surreal_kube.experiment.resolve import (
    deep_merge,
    default_document,
    dump_yaml,
    validate_document,
)
from surreal_kube.experiment.spec import Experiment
from surreal_kube.experiment.topology import Topology, build_topology
from surreal_kube.launch.local.ports import allocate_ports


class LocalRun:
    """One experiment's folder, config, ports and role processes (stopped by `close`)."""

    def __init__(
        self,
        root: Path,
        spec: dict[str, Any] | None = None,
        *,
        name: str = "t-exp",
        algorithm: str = "ppo",
    ) -> None:
        doc = default_document(name, algorithm)
        deep_merge(doc, {"spec": spec or {}})
        self.exp: Experiment = validate_document(doc)
        self.root = root
        self.dir = root / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config = self.dir / "config.yml"
        self.config.write_text(dump_yaml(self.exp))
        self.topology: Topology = build_topology(name, self.exp.spec)
        # distinct ports: free_port() per endpoint could hand out one port twice
        self.addresses = self.topology.addresses_local(
            allocate_ports(sorted(self.topology.binders), set())
        )
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def env(self, process: str) -> dict[str, str]:
        """The environment of `process`, as the local backend builds it."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SURREAL_")}
        env.update(
            self.topology.environment(
                self.topology.process(process),
                self.addresses,
                config_path=str(self.config),
                experiment_dir=str(self.dir),
            )
        )
        env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        return env

    def addr(self, endpoint: str) -> str:
        """Where others connect to `endpoint`."""
        return self.addresses[endpoint].connect

    def log_path(self, process: str) -> Path:
        """Where the test keeps a process's stderr."""
        return self.dir / f"{process}.stderr"

    def start(self, process: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Spawn one process of the topology."""
        proc = self.topology.process(process)
        with open(self.log_path(process), "ab") as out:
            popen = subprocess.Popen(
                [sys.executable, "-m", "surreal_kube.runtime", proc.role, "--id", str(proc.index)],
                env=env or self.env(process),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        self.procs[process] = popen
        return popen

    def wait_log(self, process: str, text: str, timeout: float = 30.0) -> str:
        """Wait until `process` logged `text` (its stderr); returns the log so far."""
        end = time.monotonic() + timeout
        path = self.log_path(process)
        while time.monotonic() < end:
            content = path.read_text(errors="replace") if path.exists() else ""
            if text in content:
                return content
            popen = self.procs.get(process)
            if popen is not None and popen.poll() is not None:
                raise AssertionError(f"{process} exited with {popen.returncode}:\n{content}")
            time.sleep(0.05)
        raise AssertionError(f"{process} never logged {text!r}:\n{content}")

    def terminate(self, process: str, timeout: float = 10.0) -> tuple[int, float]:
        """SIGTERM one process; returns (exit code, seconds it took to exit)."""
        popen = self.procs.pop(process)
        started = time.monotonic()
        popen.send_signal(signal.SIGTERM)
        try:
            code = popen.wait(timeout)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait()
            raise
        return code, time.monotonic() - started

    def close(self) -> None:
        """Stop every process still running (SIGTERM, then SIGKILL)."""
        for popen in self.procs.values():
            if popen.poll() is None:
                popen.send_signal(signal.SIGTERM)
        for popen in self.procs.values():
            try:
                popen.wait(10)
            except subprocess.TimeoutExpired:
                popen.kill()
                popen.wait()
        self.procs.clear()
