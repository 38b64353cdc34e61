"""Scale benchmark: 10,000 agents on 1,000 kwok nodes, our paths against kubectl in the same run.

    python bench/scale.py [--quick]

A private control plane (tests/cluster/controlplane.py) with 900 CPU nodes (32 CPU, 128Gi) and
100 GPU nodes (64 CPU, 256Gi, 8 GPUs), started and stopped here. The experiment: 10,000 agents
in pods of 10 (one CPU and 1Gi per agent), 16 evals, 16 replay and 16 parameter shards, the
learner on a GPU: 1,022 pods. `--quick`: 50 nodes, 200 agents in pods of 2.

Measured (ours against a reference measured in the same run, DESIGN.md section 7):
- render: seconds and bytes of the rendered objects vs `kubectl create --dry-run=client -o yaml`
  of the same manifests; pre-flight refusal of a 10,000-agent experiment that does not fit
  (one GPU per agent) against the 1 s goal;
- create-to-all-Running: `kubectl apply --server-side` of the same manifests (the reference),
  `surreal-kube create --direct` (the CLI applies) and `surreal-kube create` with the operator
  running (the CLI writes one Experiment, the operator applies); each timed from the command's
  start until a watch of the namespace sees every pod Running;
- `status`, `list` and `scale` (CLI processes, best of 3) on that experiment and on a namespace
  of 100 small experiments, against the `kubectl get` / `kubectl scale` that reads or writes the
  same objects;
- operator: reconcile after a spec edit (evals + 1) until the new pod runs, RSS while it
  watches the experiment's pods, API requests per minute while nothing changes (counted in the
  API server's audit log, which records only the operator's own ServiceAccount);
- delete-to-gone: `surreal-kube delete --wait` vs `kubectl delete` + waiting for no pod.

The control-plane clients get the rate limits of a large cluster (`--kube-api-qps 300`, burst
600, for the controller-manager and the scheduler): with the defaults (20 QPS) creating a
thousand pods takes the controller-manager over a minute whoever asks for them. Both paths run on
the same control plane, one after the other, each in its own namespace, the previous experiment
deleted first. Writes bench/results/scale.json (rows), scale-timeline.json (pods Running over
time, the load average) and scale.png (the plot). `SCALE_BENCH_CODE=DIR` runs the CLI and the
operator from another checkout (the figures before a change), writing scale-baseline.*.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

from common import RESULTS, Row, parse_args, print_table, write_results  # noqa: E402

from surreal_kube.errors import SpecError  # noqa: E402
from surreal_kube.experiment.resolve import resolve_experiment  # noqa: E402
from surreal_kube.experiment.spec import Experiment  # noqa: E402
from surreal_kube.launch.kube import naming  # noqa: E402
from surreal_kube.launch.kube.api.client import (  # noqa: E402
    CRD,
    EXPERIMENT,
    POD,
    Kube,
    KubeError,
    resource,
)
from surreal_kube.launch.kube.profile import profile_from_dict  # noqa: E402
from surreal_kube.launch.kube.render.objects import dump_objects, render_experiment  # noqa: E402

IMAGES = {"cpu": "registry.test/surreal-kube/runtime-cpu:1", "gpu": "registry.test/runtime-cuda:1"}
SPEC_IMAGES = [
    f"images.{k}.{f}={v}"
    for k, ref in IMAGES.items()
    for f, v in (("build", "null"), ("image", ref))
]
OPERATOR_SA = ("kube-system", "surreal-bench-operator")
OPERATOR_USER = f"system:serviceaccount:{OPERATOR_SA[0]}:{OPERATOR_SA[1]}"
QPS = ["--kube-api-qps=300", "--kube-api-burst=600"]
CODE = Path(os.environ.get("SCALE_BENCH_CODE") or ROOT).resolve()
"""Where the CLI and the operator run from: another checkout (an older commit) to measure the
figures before a change in the same way; its results go to scale-baseline.json."""
NAME = "scale" if CODE == ROOT else "scale-baseline"
SERVICE_ACCOUNT = resource("v1", "ServiceAccount")
NODE = resource("v1", "Node")
NOT_READY_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


@dataclass(frozen=True)
class Size:
    """The numbers of one run (full or --quick)."""

    cpu_nodes: int
    gpu_nodes: int
    agents: int
    batch: int
    evals: int
    small: int
    """Experiments in the namespace of small ones."""
    idle_seconds: float
    """How long the operator's requests are counted while nothing changes."""


FULL = Size(cpu_nodes=900, gpu_nodes=100, agents=10_000, batch=10, evals=16, small=100,
            idle_seconds=60.0)  # fmt: skip
QUICK = Size(cpu_nodes=45, gpu_nodes=5, agents=200, batch=2, evals=2, small=5, idle_seconds=15.0)


def sized(size: Size) -> Size:
    """`SCALE_BENCH_NODES=N`: the same capacity on N nodes (10 % GPU nodes), larger each.

    A thousand kwok nodes renew a thousand leases; on a busy 2-core machine some lapse (nodes go
    NotReady) before the last is created, so a smaller count of larger nodes may be needed.
    """
    nodes = int(os.environ.get("SCALE_BENCH_NODES") or 0)
    if not nodes:
        return size
    return replace(size, cpu_nodes=nodes - nodes // 10, gpu_nodes=max(nodes // 10, 1))


def pools(size: Size) -> list[dict[str, Any]]:
    factor = max(1, round(FULL.cpu_nodes / size.cpu_nodes)) if size.agents == FULL.agents else 1
    return [
        {
            "name": "cpu-pool",
            "count": size.cpu_nodes,
            "cpu": str(32 * factor),
            "memory": f"{128 * factor}Gi",
        },
        {
            "name": "gpu-pool",
            "count": size.gpu_nodes,
            "cpu": "64",
            "memory": "256Gi",
            "gpus": 8,
            "accelerator": "nvidia-l4",
        },
    ]


def big_sets(size: Size) -> list[str]:
    return [
        *SPEC_IMAGES,
        f"agents.count={size.agents}",
        f"agents.batch={size.batch}",
        f"evals.count={size.evals}",
        "replay.shards=16",
        "ps.shards=16",
        f"resources.agent.cpu={size.batch}",
        f"resources.agent.memory={size.batch}Gi",
        "resources.learner.gpu=1",
    ]


TINY = [
    f"resources.{c}.{k}={v}"
    for c in ("learner", "agent", "eval", "replay", "ps", "tensorplex", "loggerplex", "tensorboard")
    for k, v in (("cpu", "10m"), ("memory", "16Mi"))
]


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def expected_pods(exp: Experiment) -> int:
    return sum(g.replicas for g in exp.topology.groups)


# --------------------------------------------------------------------------- watching pods


class RunningPods:
    """Watches one namespace's pods and records (seconds, pods Running) at every change."""

    def __init__(self, kubeconfig: Path, namespace: str, expected: int, start: float) -> None:
        self.kube = Kube(kubeconfig=kubeconfig, namespace=namespace)
        self.namespace = namespace
        self.expected = expected
        self.start = start
        self.running: dict[str, bool] = {}
        self.timeline: list[tuple[float, int]] = [(0.0, 0)]
        self.all_running = threading.Event()
        self.none_left = threading.Event()
        self.done_at: float | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        version = self._list()  # before the command under test starts
        self._thread = threading.Thread(target=self._run, args=(version,), daemon=True)
        self._thread.start()

    def _list(self) -> str:
        query: dict[str, Any] = {"limit": 500}
        seen: dict[str, bool] = {}
        while True:
            page = self.kube.raw("GET", POD.path(self.namespace), query=query)
            for pod in page.get("items", []):
                seen[pod["metadata"]["name"]] = _is_running(pod)
            cont = page["metadata"].get("continue")
            if not cont:
                break
            query["continue"] = cont
        with self._lock:
            self.running = seen
            self._note()
        return str(page["metadata"]["resourceVersion"])

    def _run(self, rv: str) -> None:
        while not self._stop.is_set():
            try:
                for kind, pod in self.kube.watch(
                    POD, self.namespace, resource_version=rv, timeout=30
                ):
                    rv = pod["metadata"].get("resourceVersion") or rv
                    if kind == "BOOKMARK":
                        continue
                    with self._lock:
                        if kind == "DELETED":
                            self.running.pop(pod["metadata"]["name"], None)
                        else:
                            self.running[pod["metadata"]["name"]] = _is_running(pod)
                        self._note()
                    if self._stop.is_set():
                        return
            except KubeError:
                if self._stop.is_set():  # stop() closed the connection under the stream
                    return
                rv = self._list()

    def _note(self) -> None:
        count = sum(self.running.values())
        now = time.monotonic() - self.start
        if count != self.timeline[-1][1]:
            self.timeline.append((now, count))
        if count >= self.expected and not self.all_running.is_set():
            self.done_at = now
            self.all_running.set()
        if self.running:
            self.none_left.clear()
        else:
            self.none_left.set()

    def wait(self, event: threading.Event, timeout: float, what: str) -> None:
        if not event.wait(timeout):
            with self._lock:
                count = sum(self.running.values())
            raise RuntimeError(f"{what}: not after {timeout:.0f} s ({count} pods Running)")

    def stop(self) -> None:
        self._stop.set()
        self.kube.close()


def _is_running(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and not pod["metadata"].get(
        "deletionTimestamp"
    )


# --------------------------------------------------------------------------- processes


class Bench:
    """The control plane, the tools, and the rows measured so far."""

    def __init__(self, cp: Any, size: Size, workdir: Path) -> None:
        self.cp = cp
        self.size = size
        self.workdir = workdir
        self.rows: list[Row] = []
        self._remeasured: list[tuple[int, Callable[[], float]]] = []
        """Rows whose reference is read again at the end (`final_rows`)."""
        self.edit_reference = 0.0
        self.timelines: dict[str, list[tuple[float, int]]] = {}
        self.kube = Kube(kubeconfig=cp.kubeconfig)
        self.profile = workdir / "profile.yaml"
        self.profile.write_text("experimentVolume:\n  kind: emptyDir\n")

    def env(self) -> dict[str, str]:
        env = {**os.environ, **self.cp.env(), "COLUMNS": "200"}
        env.pop("SURREAL_KUBE_DEBUG", None)
        if CODE != ROOT:
            env["PYTHONPATH"] = str(CODE)
        return env

    def run(self, *args: str, check: bool = True, timeout: float = 900) -> float:
        """Run a command; its wall time in seconds."""
        start = time.perf_counter()
        res = subprocess.run(
            list(args), env=self.env(), cwd=CODE, capture_output=True, text=True, timeout=timeout
        )
        took = time.perf_counter() - start
        if check and res.returncode != 0:
            raise RuntimeError(f"{' '.join(args[:4])} ... failed ({res.returncode}): {res.stderr}")
        return took

    def sk(self, *args: str, check: bool = True) -> float:
        return self.run(sys.executable, "-m", "surreal_kube.cli.main", *args, check=check)

    def kubectl(self, *args: str) -> float:
        return self.run(str(self.cp.kubectl), *args)

    def best(self, fn: Callable[[], float], repeats: int = 3) -> float:
        return min(fn() for _ in range(repeats))

    def add(
        self,
        metric: str,
        ours: float,
        ref: float | Callable[[], float],
        unit: str,
        better: str = "lower",
    ) -> None:
        """A row; `ref` may be a function, read when the rows are final (`final_rows`)."""
        value = ref() if callable(ref) else ref
        row = Row(metric, ours, value, unit, better)  # type: ignore[arg-type]
        self.rows.append(row)
        if callable(ref):
            self._remeasured.append((len(self.rows) - 1, ref))
        say(f"{metric}: ours {ours:.3f} {unit}, reference {value:.3f} {unit} "
            f"(ratio {row.ratio:.2f})")  # fmt: skip

    def final_rows(self) -> list[Row]:
        """The rows, with references that were measured again since (see `Reference`)."""
        for index, ref in self._remeasured:
            self.rows[index] = replace(self.rows[index], reference=ref())
        return self.rows

    def namespace(self, name: str) -> str:
        self.kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        deadline = time.monotonic() + 60
        while self.kube.get_or_none(SERVICE_ACCOUNT, "default", name) is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"namespace {name} has no default ServiceAccount")
            time.sleep(0.2)
        return name

    def settled(self, timeout: float = 180.0) -> None:
        """Until every node is Ready and untainted twice in a row, 2 s apart.

        On a loaded machine kwok's node leases lapse: nodes go NotReady, get the not-ready
        taint, and a create that starts then waits for them, whoever makes it. Each create
        starts with every node Ready. (In two runs of 2026-12-02 some creates of either path had
        their first pod Running at 9.6-16.7 s instead of 0.7-2.3 s; in the run after this check
        came in, every node was Ready before every create: that delay has another cause.)
        """
        deadline = time.monotonic() + timeout
        calm = 0
        while calm < 2:
            nodes = self.kube.list(NODE)
            unready = [
                n["metadata"]["name"]
                for n in nodes
                if any(t.get("key") in NOT_READY_TAINTS for t in n["spec"].get("taints") or [])
                or not any(
                    c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (n.get("status") or {}).get("conditions") or []
                )
            ]
            calm = 0 if unready else calm + 1
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(unready)} nodes not Ready after {timeout:.0f} s")
            if calm < 2:
                time.sleep(2)
        say(f"cluster settled: {len(nodes)} nodes Ready")

    def watch(self, namespace: str, expected: int, start: float) -> RunningPods:
        return RunningPods(self.cp.kubeconfig, namespace, expected, start)


# --------------------------------------------------------------------------- the measurements


def measure_render(b: Bench, exp: Experiment) -> Path:
    """Render time and size vs kubectl's client dry run; returns the manifest file."""
    prof = profile_from_dict({"pools": pools(b.size), "experimentVolume": {"kind": "emptyDir"}})
    best = float("inf")
    text = ""
    for _ in range(3):
        start = time.perf_counter()
        objects = render_experiment(exp, "scale-kubectl", images=IMAGES, profile=prof)
        text = dump_objects(objects)
        best = min(best, time.perf_counter() - start)
    manifest = b.workdir / "manifest.yaml"
    manifest.write_text(text)
    ref = b.best(lambda: b.kubectl("create", "--dry-run=client", "-o", "yaml", "-f", str(manifest)))
    b.add(f"render {exp.spec.agents.count} agents ({len(objects)} objects)", best, ref, "s")
    size = len(json.dumps(objects).encode())
    b.add("rendered objects, MB as JSON (reference: the same as YAML)", size / 1e6,
          len(text.encode()) / 1e6, "MB")  # fmt: skip

    refused = resolve_experiment(
        "scale-nofit",
        sets=[*big_sets(b.size), "agents.batch=1", "resources.agent.gpu=1",
              "resources.agent.cpu=1", "resources.agent.memory=1Gi"],
    )  # fmt: skip
    start = time.perf_counter()
    try:
        render_experiment(refused, "x", images=IMAGES, profile=prof)
    except SpecError as exc:
        say(f"pre-flight: {exc}")
    else:
        raise RuntimeError("the experiment of one GPU per agent was not refused")
    b.add("pre-flight refusal, one GPU per agent (reference: the 1 s goal)",
          time.perf_counter() - start, 1.0, "s")  # fmt: skip
    return manifest


@dataclass
class Reference:
    """`kubectl apply --server-side` of the manifests, measured first, between the operator's two
    creates, and last.

    Our paths run between those runs, on a control plane that has by then created and deleted
    thousands of pods. Comparing them with the first run only would credit the reference with a
    fresher cluster; each ratio uses the mean of all runs, and each is printed.
    """

    created: list[float]
    deleted: list[float]

    def create(self) -> float:
        return sum(self.created) / len(self.created)

    def delete(self) -> float:
        return sum(self.deleted) / len(self.deleted)


def measure_kubectl(b: Bench, manifest: Path, expected: int, ref: Reference, tag: str = "") -> None:
    """Add one (create-to-all-Running, delete-to-gone) of `kubectl apply --server-side`."""
    ns = "scale-kubectl"  # the manifests name it; the first run made it and left it empty
    if not tag:
        b.namespace(ns)
    b.settled()
    start = time.monotonic()
    watch = b.watch(ns, expected, start)
    b.kubectl("apply", "--server-side", "-n", ns, "-f", str(manifest))
    watch.wait(watch.all_running, 900, "kubectl apply")
    created = watch.done_at or 0.0
    label = {"": "", "-mid": " (again)", "-last": " (again, last)"}[tag]
    b.timelines[f"kubectl apply --server-side{label}"] = list(watch.timeline)
    start = time.monotonic()
    b.kubectl("delete", "-n", ns, "--wait=false", "-f", str(manifest))
    watch.start = start
    watch.wait(watch.none_left, 900, "kubectl delete")
    deleted = time.monotonic() - start
    watch.stop()
    ref.created.append(created)
    ref.deleted.append(deleted)
    say(f"kubectl: all {expected} Running after {created:.1f} s, gone after {deleted:.1f} s")


def create_args(name: str, ns: str, b: Bench) -> list[str]:
    sets = [arg for s in big_sets(b.size) for arg in ("--set", s)]
    return [
        "create", name, "-n", ns, *sets, "--profile", str(b.profile),
        "--timeout", "900",
    ]  # fmt: skip


def measure_ours(
    b: Bench,
    name: str,
    ns: str,
    expected: int,
    *,
    direct: bool,
    ref: Reference,
    operator_pid: int | None = None,
    again: bool = False,
) -> tuple[float, float]:
    """One create, timed until every pod runs: (all Running, the command's return), in s.
    Through the operator the rows are added by the caller, from both of its creates."""
    label = "CLI --direct" if direct else "operator"
    b.settled()
    start = time.monotonic()
    cpu = cpu_now(operator_pid)
    watch = b.watch(ns, expected, start)
    took = b.sk(*create_args(name, ns, b), *(["--direct"] if direct else []))
    watch.wait(watch.all_running, 60, f"create {label}")
    used = [after - before for before, after in zip(cpu, cpu_now(operator_pid), strict=True)]
    say(f"CPU seconds while creating ({label}): the machine {used[0]:.1f} of "
        f"{2 * (time.monotonic() - start):.1f}, the CLI {used[1]:.1f}, the operator "
        f"{used[2]:.1f}")  # fmt: skip
    b.timelines[f"surreal-kube create ({label}{', again' if again else ''})"] = list(watch.timeline)
    watch.stop()
    running = watch.done_at or took
    if direct:
        add_create_rows(b, label, expected, [running], [took], ref)
    return running, took


def add_create_rows(
    b: Bench, label: str, expected: int, running: list[float], took: list[float], ref: Reference
) -> None:
    """The create rows of one path: the mean of its runs against the mean of kubectl's."""
    if len(running) > 1:
        say(f"create ({label}), each run: all Running after "
            f"{', '.join(f'{t:.2f}' for t in running)} s")  # fmt: skip
    b.add(
        f"create-to-all-Running, {expected} pods, {label} vs kubectl apply --server-side",
        sum(running) / len(running),
        ref.create,
        "s",
    )
    b.add(f"create returns ({label}) vs all Running by kubectl", sum(took) / len(took),
          ref.create, "s")  # fmt: skip


def measure_verbs(b: Bench, name: str, ns: str, what: str) -> None:
    """status, list and scale latency of the CLI vs the kubectl calls reading the same objects."""
    selector = naming.experiment_selector(name)
    ours = b.best(lambda: b.sk("status", name, "-n", ns))
    ref = b.best(lambda: b.kubectl("get", "pods", "-n", ns, "-l", selector))
    b.add(f"status {what}", ours, ref, "s")
    ours = b.best(lambda: b.sk("list", "-n", ns))
    ref = b.best(lambda: b.kubectl("get", "statefulsets,deployments,pods", "-n", ns))
    b.add(f"list, namespace of {what}", ours, ref, "s")


def measure_edit_reference(b: Bench, name: str, ns: str, expected: int) -> None:
    """kubectl's way to one more eval on the direct experiment: scale its StatefulSet, until the
    new pod runs (the reference of the operator's reconcile of the same spec edit)."""
    start = time.monotonic()
    watch = b.watch(ns, expected + 1, start)
    b.kubectl(
        "scale", "statefulset", naming.object_name(name, "evals"), "-n", ns,
        f"--replicas={b.size.evals + 1}",
    )  # fmt: skip
    watch.wait(watch.all_running, 300, "kubectl scale of the evals")
    watch.stop()
    b.edit_reference = watch.done_at or 0.0


def measure_scale(b: Bench, name: str, ns: str) -> None:
    agents = b.size.agents
    ours = b.sk("scale", name, "-n", ns, "--agents", str(agents + b.size.batch))
    ref = b.kubectl(
        "scale", "statefulset", naming.object_name(name, "agents"), "-n", ns,
        f"--replicas={agents // b.size.batch + 2}",
    )  # fmt: skip
    b.add(f"scale {agents} agents by one pod (direct) vs kubectl scale", ours, ref, "s")


def measure_delete(
    b: Bench, name: str, ns: str, expected: int, ref: Callable[[], float], label: str
) -> None:
    start = time.monotonic()
    watch = b.watch(ns, expected, start)
    ours = b.sk("delete", name, "-n", ns, "--wait")
    watch.wait(watch.none_left, 300, "delete")
    watch.stop()
    b.add(f"delete-to-gone ({label}) vs kubectl delete", max(ours, time.monotonic() - start),
          ref, "s")  # fmt: skip


# --------------------------------------------------------------------------- operator


def operator_kubeconfig(b: Bench) -> Path:
    """A kubeconfig for the operator's own ServiceAccount (cluster-admin), so the audit log can
    tell its requests from everyone else's."""
    ns, sa = OPERATOR_SA
    b.kube.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                  "metadata": {"name": sa, "namespace": ns}})  # fmt: skip
    b.kube.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": sa},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}],
        }
    )
    token = b.kube.raw(
        "POST",
        SERVICE_ACCOUNT.path(ns, sa, "token"),
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
              "spec": {"expirationSeconds": 7200}},
    )["status"]["token"]  # fmt: skip
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "bench", "cluster": {"server": b.cp.server,
                                          "certificate-authority": str(b.cp.pki / "ca.crt")}}
        ],
        "users": [{"name": "operator", "user": {"token": token}}],
        "contexts": [{"name": "operator", "context": {"cluster": "bench", "user": "operator"}}],
        "current-context": "operator",
    }  # fmt: skip
    path = b.workdir / "operator.kubeconfig"
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    return path


def install_crd(b: Bench) -> None:
    b.kubectl("apply", "--server-side", "-f", str(ROOT / "operators" / "crd.yaml"))
    deadline = time.monotonic() + 60
    while not b.kube.has_experiment_crd():
        if time.monotonic() > deadline:
            raise RuntimeError("the Experiment CRD is not served")
        time.sleep(0.2)
    b.kube.get(CRD, "experiments.surreal.ai")


def cpu_now(pid: int | None) -> tuple[float, float, float]:
    """CPU seconds so far: (every process of the machine, our finished children, `pid`)."""
    tick = os.sysconf("SC_CLK_TCK")
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    busy = sum(int(v) for i, v in enumerate(fields) if i not in (3, 4)) / tick  # not idle/iowait
    children = os.times().children_user + os.times().children_system
    own = 0.0
    if pid is not None:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        own = (int(stat[11]) + int(stat[12])) / tick  # utime, stime
    return busy, children, own


def rss_mib(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a process in MiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024
    return fields["VmRSS"], fields["VmHWM"]


def operator_requests(audit: Path, since: float, until: float) -> list[str]:
    """The operator's requests completed between two wall-clock times (the audit log)."""
    out = []
    with open(audit, encoding="utf-8") as f:
        for line in f:
            event = json.loads(line)
            if event.get("user", {}).get("username") != OPERATOR_USER:
                continue
            stamp = _epoch(event["stageTimestamp"])
            if since <= stamp <= until:
                out.append(f"{event['verb']} {event.get('requestURI', '')}")
    return out


def _epoch(stamp: str) -> float:
    import datetime as dt

    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def wait_healthy(op: subprocess.Popen[bytes], url: str, timeout: float = 120.0) -> None:
    """Until the operator serves its liveness probe (kopf starts it with its watches).

    An operator runs long before anyone creates an experiment; timing a create from the
    operator's own start would count its interpreter and imports, which kubectl never pays.
    """
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if op.poll() is not None:
            raise RuntimeError(f"the operator exited ({op.returncode}) before it was ready")
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"the operator did not serve {url} within {timeout:.0f} s")


def measure_operator(b: Bench, ref: Reference, expected: int, audit: Path, manifest: Path) -> None:
    """The operator's create (twice, a kubectl run between them: the create's goal is a ratio
    near 1, and one pair of runs on a busy 2-core machine differs by 5 % either way), the verbs,
    a spec edit, its idle requests and memory, and delete."""
    ns = b.namespace("scale-operator")
    name = "scale-op"
    install_crd(b)
    log = open(b.workdir / "operator.log", "ab")  # noqa: SIM115 - the child keeps it
    from tests.cluster.controlplane import free_port

    health = f"http://127.0.0.1:{free_port()}/healthz"
    op = subprocess.Popen(
        [sys.executable, "-m", "surreal_kube.operator", "-n", ns, "--kubeconfig",
         str(operator_kubeconfig(b)), "--profile", str(b.profile), "--log-level", "warning",
         "--liveness", health],
        stdout=log, stderr=subprocess.STDOUT, cwd=CODE, env=b.env(), start_new_session=True,
    )  # fmt: skip
    try:
        wait_healthy(op, health)
        first = measure_ours(b, name, ns, expected, direct=False, ref=ref, operator_pid=op.pid)
        rss, _ = rss_mib(op.pid)
        b.add(f"operator RSS watching {expected} pods (reference: 100 MiB)", rss, 100.0, "MiB")
        measure_verbs(b, name, ns, f"{b.size.agents} agents (operator)")

        # a spec edit: one more eval, until the operator observed it and the new pod runs
        start = time.monotonic()
        watch = b.watch(ns, expected + 1, start)
        b.kube.patch(EXPERIMENT, name, {"spec": {"evals": {"count": b.size.evals + 1}}}, ns)
        watch.wait(watch.all_running, 300, "the spec edit")
        edit = watch.done_at or 0.0
        watch.stop()
        b.add("spec edit (evals + 1) until its pod runs: operator vs kubectl scale",
              edit, b.edit_reference, "s")  # fmt: skip

        time.sleep(10 if b.size is FULL else 3)  # let the edit's refreshes settle
        since = time.time()
        time.sleep(b.size.idle_seconds)
        until = time.time()
        time.sleep(2)  # the audit log is written in batches
        seen = operator_requests(audit, since, until)
        per_minute = len(seen) * 60.0 / (until - since)
        say("operator requests while idle: " + "; ".join(seen[:20]))
        b.add("operator API requests per minute, idle (reference: 6 per minute)",
              per_minute, 6.0, "req/min")  # fmt: skip
        _, hwm = rss_mib(op.pid)
        b.add("operator peak RSS (reference: 200 MiB)", hwm, 200.0, "MiB")
        measure_delete(b, name, ns, expected, ref.delete, "operator")

        measure_kubectl(b, manifest, expected, ref, tag="-mid")
        again = measure_ours(
            b, f"{name}-2", ns, expected, direct=False, ref=ref, operator_pid=op.pid, again=True
        )
        b.sk("delete", f"{name}-2", "-n", ns, "--wait")
        add_create_rows(b, "operator", expected, [first[0], again[0]], [first[1], again[1]], ref)
    finally:
        op.terminate()
        try:
            op.wait(timeout=20)
        except subprocess.TimeoutExpired:
            op.kill()
        log.close()


def measure_small(b: Bench) -> None:
    """A namespace of many small experiments: list and status of one of them."""
    from surreal_kube.launch.kube.lifecycle.apply import create_objects

    ns = b.namespace("scale-small")
    prof = profile_from_dict({"pools": pools(b.size), "experimentVolume": {"kind": "emptyDir"}})
    with Kube(kubeconfig=b.cp.kubeconfig, namespace=ns) as kube:
        for i in range(b.size.small):
            exp = resolve_experiment(f"small-{i}", sets=[*SPEC_IMAGES, *TINY, "agents.count=1"])
            create_objects(kube, render_experiment(exp, ns, images=IMAGES, profile=prof), ns)
    say(f"{b.size.small} small experiments created")
    measure_verbs(b, "small-7" if b.size.small > 7 else "small-0", ns,
                  f"{b.size.small} small experiments")  # fmt: skip


# --------------------------------------------------------------------------- main


def audit_args(workdir: Path) -> tuple[list[str], Path]:
    policy = workdir / "audit-policy.yaml"
    policy.write_text(
        json.dumps(
            {
                "apiVersion": "audit.k8s.io/v1",
                "kind": "Policy",
                "omitStages": ["RequestReceived", "ResponseStarted"],
                "rules": [{"level": "Metadata", "users": [OPERATOR_USER]}, {"level": "None"}],
            }
        )
    )
    log = workdir / "audit.log"
    return [f"--audit-policy-file={policy}", f"--audit-log-path={log}"], log


def plot(timelines: dict[str, list[tuple[float, int]]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for label, points in timelines.items():
        xs = [p[0] for p in points]
        ys = [p[1] for p in points]
        ax.step(xs, ys, where="post", label=label)
    ax.set_xlabel("seconds since the command started")
    ax.set_ylabel("pods Running")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    size = sized(QUICK if args.quick else FULL)
    from tests.cluster.controlplane import ControlPlane

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        workdir = Path(tmp)
        audit, audit_log = audit_args(workdir)
        cp = ControlPlane(
            pools=pools(size),
            extra_args={
                "kube-apiserver": audit,
                "kube-controller-manager": QPS,
                "kube-scheduler": QPS,
            },
        )
        started = time.monotonic()
        cp.start(timeout=600)
        say(f"control plane with {size.cpu_nodes + size.gpu_nodes} nodes up in "
            f"{time.monotonic() - started:.0f} s")  # fmt: skip
        try:
            b = Bench(cp, size, workdir)
            exp = resolve_experiment("scale-kubectl", sets=big_sets(size))
            expected = expected_pods(exp)
            manifest = measure_render(b, exp)
            ref = Reference([], [])
            measure_kubectl(b, manifest, expected, ref)

            ns = b.namespace("scale-cli")
            measure_ours(b, "scale-cli", ns, expected, direct=True, ref=ref)
            measure_verbs(b, "scale-cli", ns, f"{size.agents} agents (direct)")
            measure_edit_reference(b, "scale-cli", ns, expected)
            measure_scale(b, "scale-cli", ns)
            measure_delete(b, "scale-cli", ns, expected, ref.delete, "direct")

            measure_operator(b, ref, expected, audit_log, manifest)
            measure_kubectl(b, manifest, expected, ref, tag="-last")
            measure_small(b)
        finally:
            cp.stop()
    load_after = os.getloadavg()
    rows = b.final_rows()
    print_table(NAME, rows)
    print(f"load average before {load_before[0]:.1f}, after {load_after[0]:.1f} (1 min)")
    print(f"wrote {write_results(NAME, rows)}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{NAME}-timeline.json").write_text(
        json.dumps(
            {
                "size": size.__dict__,
                "pods": expected,
                "loadavg": {"before": load_before, "after": load_after},
                "timelines": b.timelines,
            },
            indent=1,
        )
        + "\n"
    )
    title = f"{size.agents:,} agents ({expected:,} pods) on {size.cpu_nodes + size.gpu_nodes} nodes"
    plot(b.timelines, RESULTS / f"{NAME}.png", title)


if __name__ == "__main__":
    main()
