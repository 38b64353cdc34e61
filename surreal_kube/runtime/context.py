"""What a role knows about itself: read from the environment the topology defines, and nothing else.

    SURREAL_EXPERIMENT       experiment name
    SURREAL_ROLE             the role (learner, replay, replay-shard, ps, ps-shard, tensorplex,
                             loggerplex, tensorboard, agents, eval)
    SURREAL_PROCESS          unique process name (`agents-3`, `replay-shard-1`, ...)
    SURREAL_INDEX            replica / shard index (`--id N` overrides it); if absent, for agents
                             and evals the trailing `-<n>` of HOSTNAME (a StatefulSet pod's
                             ordinal), else 0
    (SURREAL_PROCESS may be absent in a replicated pod template: it is derived from role + index)
    SURREAL_CONFIG           path to the resolved experiment YAML
    SURREAL_EXPERIMENT_DIR   folder holding logs/, tensorboard/, checkpoints/, status/
    SURREAL_<ENDPOINT>_BIND  for each endpoint this process binds (e.g. SURREAL_PS_SERVE_BIND)
    SURREAL_<ENDPOINT>_ADDR  for each endpoint it connects to
    SURREAL_POD_ENDPOINTS    endpoints of this process that stay inside its pod (comma-separated):
                             their sockets skip CURVE (see `comm.curve`)
    SURREAL_CURVE_KEYS       path of the experiment's CURVE key file (a Secret's mount on
                             Kubernetes); if absent, `<SURREAL_EXPERIMENT_DIR>/curve.key` when
                             that exists (the local backend writes it). The path only: keys are
                             never passed in the environment (see `comm.curve`)

A missing variable is a `RuntimeRoleError` that names it, raised at start, not a KeyError later.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from surreal_kube.comm import curve
from surreal_kube.errors import RuntimeRoleError
from surreal_kube.experiment.spec import Experiment, ExperimentSpec
from surreal_kube.experiment.topology import POD_ENDPOINTS_VAR

PREFIX = "SURREAL_"


def _env_key(endpoint: str) -> str:
    return endpoint.upper().replace("-", "_")


def index_from_hostname(hostname: str) -> int | None:
    """`exp-agents-12` -> 12 (a StatefulSet pod's ordinal); None if the name has no such suffix."""
    match = re.search(r"-(\d+)$", hostname)
    return int(match.group(1)) if match else None


def load_experiment(path: str | Path) -> Experiment:
    """The resolved experiment document a role was started with."""
    try:
        from surreal_kube.experiment.resolve import load_experiment_file
    except ImportError:  # pragma: no cover - the resolver ships with the spec
        import yaml

        return Experiment.model_validate(yaml.safe_load(Path(path).read_text()))
    return load_experiment_file(path)


def env_step_share(total: int | None, agents: int, agent_id: int) -> int | None:
    """Agent `agent_id`'s share of an env-step budget of `total` over `agents` agents.

    The budget is enforced where steps are taken: each agent stops stepping at its share and the
    shares add up to `total` exactly, so a run ends at its budget whatever the reporting period,
    and a pod on Kubernetes keeps to it with no supervisor watching.
    """
    if total is None:
        return None
    base, extra = divmod(total, agents)
    return base + (1 if agent_id < extra else 0)


_REPLICATED = {"agents": "agents", "eval": "evals"}
"""Roles run as StatefulSet replicas on Kubernetes, and the group name that prefixes their pods."""
_SHARDS = ("replay-shard", "ps-shard")


def _index(env: Mapping[str, str], role: str, cli_index: int | None) -> int:
    """--id, else SURREAL_INDEX, else (replicated roles) the pod ordinal in HOSTNAME, else 0."""
    if cli_index is not None:
        return cli_index
    raw = env.get(PREFIX + "INDEX")
    if raw:
        try:
            return int(raw)
        except ValueError as exc:
            raise RuntimeRoleError(f"{PREFIX}INDEX must be an integer, got {raw!r}") from exc
    if role in _REPLICATED:
        from_host = index_from_hostname(env.get("HOSTNAME", ""))
        if from_host is not None:
            return from_host
    return 0


def _process_name(role: str, index: int) -> str:
    """The topology's process name, for pods whose template cannot carry SURREAL_PROCESS."""
    if role in _REPLICATED:
        return f"{_REPLICATED[role]}-{index}"
    if role in _SHARDS:
        return f"{role}-{index}"
    return role


@dataclass
class RoleContext:
    """Identity, addresses and folders of one role process."""

    experiment: str
    role: str
    process: str
    index: int
    config_path: str
    experiment_dir: Path
    env: Mapping[str, str] = field(repr=False, default_factory=dict)

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] | None = None,
        *,
        role: str | None = None,
        index: int | None = None,
    ) -> RoleContext:
        """Read the context; `role`/`index` (from the command line) fill in what the env lacks."""
        env = dict(os.environ if env is None else env)

        def need(name: str) -> str:
            value = env.get(PREFIX + name)
            if not value:
                raise RuntimeRoleError(
                    f"environment variable {PREFIX}{name} is not set; roles are started by a "
                    "backend (surreal-kube create) that sets their environment from the topology"
                )
            return value

        env_role = env.get(PREFIX + "ROLE")
        if role and env_role and role != env_role:
            raise RuntimeRoleError(f"asked to run role {role!r} but {PREFIX}ROLE is {env_role!r}")
        the_role = role or need("ROLE")
        idx = _index(env, the_role, index)
        if the_role in _REPLICATED or the_role in _SHARDS:
            process = _process_name(the_role, idx)  # always agrees with the index it runs as
        else:
            process = env.get(PREFIX + "PROCESS") or the_role
        return cls(
            experiment=need("EXPERIMENT"),
            role=the_role,
            process=process,
            index=idx,
            config_path=need("CONFIG"),
            experiment_dir=Path(need("EXPERIMENT_DIR")),
            env=env,
        )

    @cached_property
    def experiment_doc(self) -> Experiment:
        """The experiment document (metadata + spec)."""
        try:
            return load_experiment(self.config_path)
        except FileNotFoundError as exc:
            raise RuntimeRoleError(
                f"experiment config {self.config_path!r} does not exist"
            ) from exc

    @property
    def spec(self) -> ExperimentSpec:
        """The resolved spec."""
        return self.experiment_doc.spec

    def bind(self, endpoint: str) -> str:
        """The address to bind `endpoint` on (SURREAL_<ENDPOINT>_BIND)."""
        return self._addr(endpoint, "BIND", "binds")

    def addr(self, endpoint: str) -> str:
        """The address to connect to `endpoint` (SURREAL_<ENDPOINT>_ADDR)."""
        return self._addr(endpoint, "ADDR", "connects to")

    def optional_addr(self, endpoint: str) -> str | None:
        """The connect address, or None when this process has no such peer."""
        return self.env.get(f"{PREFIX}{_env_key(endpoint)}_ADDR") or None

    def _addr(self, endpoint: str, suffix: str, verb: str) -> str:
        var = f"{PREFIX}{_env_key(endpoint)}_{suffix}"
        value = self.env.get(var)
        if not value:
            raise RuntimeRoleError(
                f"{self.process} {verb} {endpoint!r} but {var} is not set in its environment"
            )
        if endpoint in self.pod_endpoints:
            try:
                curve.pod_private(value)
            except ValueError as exc:
                raise RuntimeRoleError(f"{self.process}: {var}: {exc}") from None
        return value

    @cached_property
    def pod_endpoints(self) -> frozenset[str]:
        """This process's endpoints that stay inside its pod (SURREAL_POD_ENDPOINTS): their
        sockets are plain, even with keys installed (`comm.curve`)."""
        raw = self.env.get(POD_ENDPOINTS_VAR, "")
        return frozenset(n for n in raw.split(",") if n)

    @property
    def agent_ids(self) -> tuple[int, ...]:
        """Agents of an `agents` process: range(index*batch, (index+1)*batch)."""
        batch = self.spec.agents.per_process
        return tuple(range(self.index * batch, (self.index + 1) * batch))

    @property
    def env_step_shares(self) -> dict[int, int | None]:
        """Each agent of this process: its share of `session.maxEnvSteps` (None: no budget)."""
        spec = self.spec
        return {
            aid: env_step_share(spec.session.max_env_steps, spec.agents.count, aid)
            for aid in self.agent_ids
        }

    @property
    def curve_key_file(self) -> tuple[Path, bool] | None:
        """The experiment's key file and whether it must be private to its owner (the local
        folder's file; a Secret's mount is the pod's alone), or None: no keys, plain sockets.

        A path named by SURREAL_CURVE_KEYS must exist: a pod that was meant to have keys and
        lacks them fails at start rather than serving every peer."""
        named = self.env.get(curve.KEYS_PATH_VAR)
        if named:
            return Path(named), False
        local = self.experiment_dir / curve.KEY_FILE
        return (local, True) if local.exists() else None

    def install_curve(self) -> curve.CurveKeys | None:
        """Load the experiment's keys and make every socket of this process a CURVE socket with
        them (`comm.curve`); call before the first socket. None: no key file, plain sockets."""
        found = self.curve_key_file
        try:
            if found is None:
                return curve.install_from(None)
            path, private = found
            return curve.install_from(path, private=private)
        except curve.CurveKeyError as exc:
            raise RuntimeRoleError(f"{self.process}: {exc}") from exc

    def folder(self, name: str) -> Path:
        """A sub-folder of the experiment folder, created: logs, tensorboard, checkpoints..."""
        path = self.experiment_dir / name
        path.mkdir(parents=True, exist_ok=True)
        return path
