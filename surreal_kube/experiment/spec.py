"""The experiment spec: one document, the same shape as the `Experiment` custom resource.

Every backend, the renderer, the operator and every runtime role read this one model, so a field
exists in exactly one place and its description here is what `--help` and the CRD schema show.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final, Literal, NamedTuple, TypeVar

from pydantic import Field, PrivateAttr, field_validator, model_validator

from surreal_kube.experiment.algorithms import AlgorithmConfig, PPOConfig
from surreal_kube.experiment.quantity import CpuQuantity, MemoryQuantity
from surreal_kube.experiment.topology import Topology, build_topology
from surreal_kube.schema import SpecModel

API_VERSION: Final = "surreal.ai/v1alpha1"
KIND: Final = "Experiment"

COMPONENTS = (
    "learner",
    "agent",
    "eval",
    "replay",
    "ps",
    "tensorplex",
    "loggerplex",
    "tensorboard",
    "replay-shard",
    "ps-shard",
)
"""Every component: what the spec's resources and placement are keyed by. A shard is a
component of its own only where it is a pod of its own (`layout: pods`); in the default layout
it is a container of its service's pod, inside that pod's resources."""

ShardLayout = Literal["containers", "pods"]
_LAYOUT_HELP = (
    "containers: the shards are containers of one pod, which they share (one node, that pod's "
    "resources); pods: each shard is a pod of its own (a StatefulSet `<exp>-{shard}`, "
    "resources.{shard} each), which the scheduler spreads over nodes"
)


_Settings = TypeVar("_Settings", bound=Mapping[str, object])


def known_components(value: _Settings) -> _Settings:
    """`value` if every key names a component (settings per component: the spec's resources and
    placement, a profile's priorityClasses), else ValueError with a suggestion."""
    from surreal_kube.experiment.suggest import did_you_mean

    for key in value:
        if key not in COMPONENTS:
            raise ValueError(
                f"unknown component {key!r}{did_you_mean(key, COMPONENTS)}; "
                f"valid: {', '.join(COMPONENTS)}"
            )
    return value


class EnvSpec(SpecModel):
    """Which environment agents step, and how it is wrapped."""

    id: str = Field(
        "gym:HalfCheetah-v5", max_length=256, description="`gym:<gymnasium id>`, e.g. gym:Ant-v5"
    )
    kwargs: dict[str, bool | int | float | str | None] = Field(
        default_factory=dict,
        max_length=64,
        description="keyword arguments passed to gymnasium.make",
    )
    max_episode_steps: int | None = Field(
        None, ge=1, description="truncate episodes after this many steps; null: the env's own"
    )
    frame_stack: int = Field(1, ge=1, description="stack this many frames along the channel axis")
    pixel: bool = Field(False, description="observe rendered pixels (uint8) instead of the state")
    action_repeat: int = Field(1, ge=1, description="repeat each action this many env steps")

    @field_validator("id")
    @classmethod
    def _check_id(cls, value: str) -> str:
        prefix, sep, name = value.partition(":")
        if not sep or prefix != "gym" or not name:
            raise ValueError(
                f"must look like 'gym:<gymnasium id>' (e.g. gym:Ant-v5), got {value!r}"
            )
        return value


class AgentsSpec(SpecModel):
    """Agents step the environment with the newest policy and send experience to replay."""

    count: int = Field(2, ge=1, le=100_000, description="number of agents")
    batch: int | None = Field(
        None,
        ge=1,
        description="agents that share one process (one pod, one GPU); must divide count; "
        "null: one per pod on Kubernetes, and locally as many as keep the agent processes "
        "within the machine's CPU cores",
    )
    envs_per_agent: int | None = Field(
        None,
        ge=1,
        description="environments each agent steps in lockstep (one forward pass for all); "
        "null: the algorithm's default (ppo 4, ddpg 1)",
    )
    fetch_mode: Literal["episode", "step"] = Field(
        "step", description="fetch parameters once per episode, or every fetchInterval steps"
    )
    fetch_interval: int = Field(100, ge=1, description="steps between fetches (fetchMode=step)")
    flush_iteration: int | None = Field(
        None,
        ge=1,
        description="items buffered before one send to replay; null: the algorithm's default "
        "(ppo 1: on-policy items age while they wait; ddpg 4)",
    )
    device: Literal["auto", "cpu", "cuda"] = Field("cpu", description="where agents run inference")

    @property
    def per_process(self) -> int:
        """Agents of one process (pod): `batch`, else one. The local launcher fills `batch` in
        before anything runs (`launch.local.backend.pack_agents`), so null means one per pod."""
        return self.batch or 1

    @property
    def groups(self) -> int:
        """Number of agent processes (pods): one per batch."""
        return self.count // self.per_process


class EvalsSpec(SpecModel):
    """Evaluators run the policy without exploration noise and report returns."""

    count: int = Field(1, ge=0, le=256, description="number of eval processes")
    mode: Literal["deterministic", "stochastic"] = Field(
        "deterministic", description="act with the mean action or sample from the policy"
    )
    interval_seconds: float = Field(10.0, gt=0, description="seconds between evaluation runs")
    episodes: int = Field(
        5, ge=1, description="episodes per evaluation run (their mean and std are reported)"
    )
    record_video: bool = Field(False, description="record an mp4 of one episode per run")


class RateLimit(NamedTuple):
    """What each replay shard's limiter holds (`SampleToInsertRatio`)."""

    samples_per_insert: float
    tolerance: float
    """Items inserts may run ahead of the ratio (or behind it)."""
    center: float
    """Items a balanced shard holds: `replay.startSampling` off-policy. On-policy the band's low
    end is the start condition, so a shard serves a batch as soon as it holds one and takes in
    at most `2 * tolerance - batch` more; anything that waited longer would only age."""


class ReplaySpec(SpecModel):
    """The replay service: a load balancer in front of N shards."""

    kind: Literal["fifo", "uniform", "prioritized"] = Field(
        "fifo", description="fifo (on-policy), uniform ring buffer, or prioritized proportional"
    )
    shards: int = Field(1, ge=1, le=64, description="replay shards behind the load balancer")
    layout: ShardLayout = Field("containers", description=_LAYOUT_HELP.format(shard="replay-shard"))
    capacity: int = Field(
        4096, ge=1, description="items (sub-trajectories or transitions) held per shard"
    )
    start_sampling: int = Field(
        64, ge=1, description="serve batches only once a shard holds this many items"
    )
    alpha: float = Field(0.6, ge=0, description="prioritized: priority exponent")
    beta: float = Field(0.4, ge=0, le=1, description="prioritized: importance-weight exponent")
    prefetch: int = Field(
        4,
        ge=1,
        description="batches the learner prefetches in the background (off-policy; an "
        "on-policy learner asks for each batch when it is ready for it)",
    )
    samples_per_insert: float | None = Field(
        None,
        ge=0,
        description="rate limiter: items sampled per item inserted, held by each shard (agents "
        "wait when ahead); 0: off; null: the algorithm's default (ppo 1, ddpg 128)",
    )
    rate_tolerance: float | None = Field(
        None,
        gt=0,
        description="rate limiter: items inserts may run ahead of (or behind) the ratio; null: "
        "ppo 1 batch, ddpg 1000",
    )


class PSSpec(SpecModel):
    """The parameter server: N replicas behind one proxy."""

    shards: int = Field(1, ge=1, le=64, description="parameter-server shards behind the proxy")
    layout: ShardLayout = Field("containers", description=_LAYOUT_HELP.format(shard="ps-shard"))
    timeout_seconds: float = Field(2.0, gt=0, description="client fetch timeout before rebuild")


class CheckpointSpec(SpecModel):
    """Periodic, atomic learner checkpoints."""

    period: int = Field(100, ge=1, description="learner iterations between checkpoints")
    min_interval_seconds: float = Field(60.0, ge=0, description="at least this long between saves")
    keep_history: int = Field(2, ge=0, description="keep the newest N checkpoints")
    keep_best: int = Field(2, ge=0, description="keep the best N checkpoints by eval return")


class MetricsSpec(SpecModel):
    """How often each role reports to tensorplex."""

    agent_interval_seconds: float = Field(5.0, gt=0, description="agent metric period")
    learner_interval_seconds: float = Field(2.0, gt=0, description="learner metric period")
    agent_bin_size: int = Field(8, ge=1, description="agents grouped per TensorBoard bin")


class SessionSpec(SpecModel):
    """Budgets, seeds, checkpoints and metrics of one run."""

    seed: int = Field(0, ge=0, description="base seed; agent i uses seed + i")
    max_env_steps: int | None = Field(
        None, ge=1, description="stop once agents stepped this many env steps in total"
    )
    max_time_seconds: float | None = Field(None, gt=0, description="stop after this wall time")
    learner_device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="auto: CUDA when present"
    )
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    metrics: MetricsSpec = Field(default_factory=MetricsSpec)


class Resources(SpecModel):
    """What one process (pod) of a component asks for."""

    cpu: CpuQuantity = Field("1", description="CPU request, Kubernetes quantity (e.g. 500m, 2)")
    memory: MemoryQuantity = Field(
        "2Gi", description="memory request, Kubernetes quantity (e.g. 512Mi)"
    )
    gpu: int = Field(0, ge=0, le=16, description="nvidia.com/gpu limit")


def _default_resources() -> dict[str, Resources]:
    small = Resources(cpu="250m", memory="512Mi")
    return {
        "learner": Resources(cpu="2", memory="4Gi"),
        "agent": Resources(cpu="1", memory="1Gi"),
        "eval": Resources(cpu="500m", memory="1Gi"),
        "replay": Resources(cpu="1", memory="2Gi"),
        "ps": small,
        "tensorplex": small,
        "loggerplex": small,
        "tensorboard": small,
    }


def _shard_resources() -> dict[str, Resources]:
    """What a shard pod asks for (`layout: pods`) when the spec says nothing: what its
    service's pod asks for in the one-pod layout, now for each shard."""
    return {
        "replay-shard": Resources(cpu="1", memory="2Gi"),
        "ps-shard": Resources(cpu="250m", memory="512Mi"),
    }


class ImageBuild(SpecModel):
    """An image to build: a Dockerfile plus context directories, tagged by content hash."""

    dockerfile: str = Field(max_length=1024, description="path to the Dockerfile")
    context: list[str] = Field(
        default_factory=lambda: ["."], max_length=64, description="context directories"
    )
    repository: str = Field(
        max_length=1024, description="repository to tag (and push) the image as"
    )


class ImageSpec(SpecModel):
    """Either a prebuilt image (used as is) or a build."""

    image: str | None = Field(
        None, max_length=1024, description="a prebuilt image reference, used as is"
    )
    build: ImageBuild | None = Field(None, description="build this image (tag = content hash)")

    @model_validator(mode="after")
    def _one_of(self) -> ImageSpec:
        if (self.image is None) == (self.build is None):
            raise ValueError("set exactly one of 'image' or 'build'")
        return self


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
"""RFC 1123 label: a LocalQueue's name is the value of Kueue's queue-name label."""


def _default_images() -> dict[str, ImageSpec]:
    # `@surreal-kube`: the folder of the installed package, whose Dockerfiles ship inside it, so
    # the defaults build from a checkout and from a pip install alike
    # (launch/kube/images/planner.py).
    return {
        "cpu": ImageSpec(
            build=ImageBuild(
                dockerfile="@surreal-kube/surreal_kube/dockerfiles/runtime-cpu.Dockerfile",
                context=["@surreal-kube"],
                repository="surreal-kube/runtime-cpu",
            )
        ),
        "gpu": ImageSpec(
            build=ImageBuild(
                dockerfile="@surreal-kube/surreal_kube/dockerfiles/runtime-cuda.Dockerfile",
                context=["@surreal-kube"],
                repository="surreal-kube/runtime-cuda",
            )
        ),
    }


class ExperimentSpec(SpecModel):
    """Everything a researcher decides about one experiment."""

    algorithm: AlgorithmConfig = Field(default_factory=PPOConfig, description="ppo or ddpg")
    env: EnvSpec = Field(default_factory=EnvSpec)
    agents: AgentsSpec = Field(default_factory=AgentsSpec)
    evals: EvalsSpec = Field(default_factory=EvalsSpec)
    replay: ReplaySpec = Field(default_factory=ReplaySpec)
    ps: PSSpec = Field(default_factory=PSSpec)
    session: SessionSpec = Field(default_factory=SessionSpec)
    resources: dict[str, Resources] = Field(
        default_factory=_default_resources,
        description="per component: cpu, memory, gpu",
    )
    images: dict[str, ImageSpec] = Field(
        default_factory=_default_images,
        max_length=16,
        description="named images: 'cpu' for CPU components, 'gpu' for components with a GPU",
    )
    placement: dict[str, str] = Field(
        default_factory=dict,
        description="node pool per component; unset: chosen by fit",
    )
    queue: str | None = Field(
        None,
        description="Kueue LocalQueue that admits the whole experiment or none of it "
        "(the operator's --default-queue when unset; needs the operator)",
    )

    @field_validator("queue")
    @classmethod
    def _queue_name(cls, value: str | None) -> str | None:
        if value is not None and not _DNS_LABEL.fullmatch(value):
            raise ValueError(
                f"must be a LocalQueue's name (lowercase letters, digits and '-', starting and "
                f"ending with a letter or digit, at most 63 characters), got {value!r}"
            )
        return value

    @field_validator("resources", "placement")
    @classmethod
    def _known_components(cls, value: dict[str, object]) -> dict[str, object]:
        return known_components(value)

    @model_validator(mode="after")
    def _check(self) -> ExperimentSpec:
        if self.agents.count % self.agents.per_process:
            raise ValueError(
                f"agents.batch: must divide agents.count ({self.agents.count}), got "
                f"{self.agents.batch}: every agent process (pod) runs the same number of agents"
            )
        if self.replay.start_sampling > self.replay.capacity:
            raise ValueError(
                f"replay.startSampling: must be <= replay.capacity "
                f"({self.replay.capacity}), got {self.replay.start_sampling}"
            )
        self._check_rate_limit()
        if self.algorithm.name == "ppo" and self.replay.kind != "fifo":
            raise ValueError(
                f"replay.kind: ppo is on-policy and needs 'fifo', got {self.replay.kind!r}"
            )
        for name in ("cpu", "gpu"):
            if name not in self.images:
                raise ValueError(f"images.{name}: is required")
        gpus = self.component_resources("learner").gpu
        if gpus and self.session.learner_device == "cpu":
            raise ValueError(
                f"session.learnerDevice: 'cpu' beside resources.learner.gpu={gpus}: the pod "
                "would hold a GPU it never uses; valid: 'cuda' or 'auto' (both compute on it), "
                "or resources.learner.gpu=0"
            )
        return self

    def envs_per_agent(self) -> int:
        """Environments each agent steps: `agents.envsPerAgent`, else the algorithm's default."""
        from surreal_kube.experiment.algorithms import envs_per_agent

        return envs_per_agent(self.algorithm, self.agents.envs_per_agent)

    def rate_limit(self) -> RateLimit:
        """The ratio each replay shard holds: the spec's `replay.samplesPerInsert` and
        `replay.rateTolerance`, else the algorithm's defaults, and where its band sits."""
        from surreal_kube.experiment.algorithms import default_rate_limit, flush_iteration

        message = flush_iteration(self.algorithm, self.agents.flush_iteration)
        spi, tolerance = default_rate_limit(self.algorithm, message)
        r = self.replay
        spi = spi if r.samples_per_insert is None else r.samples_per_insert
        tolerance = tolerance if r.rate_tolerance is None else r.rate_tolerance
        center = float(r.start_sampling)
        if r.kind == "fifo" and spi > 0:
            # the band's low end at the start condition: a shard serves as soon as it may
            start = max(r.start_sampling, self.algorithm.batch_size)
            center = start - self.algorithm.batch_size / spi + tolerance
        return RateLimit(spi, tolerance, center)

    def _check_rate_limit(self) -> None:
        """Between a shard's limits (inserts wait above one, samples below the other) there must
        be room for a batch and a whole experience message: a shard whose count sits where the
        next message does not fit and the next batch is not there yet neither takes nor serves."""
        from surreal_kube.experiment.algorithms import flush_iteration

        spi, tolerance, _ = self.rate_limit()
        batch = self.algorithm.batch_size
        message = flush_iteration(self.algorithm, self.agents.flush_iteration)
        if spi > 0 and (2 * tolerance - message) * spi < batch:
            raise ValueError(
                f"replay.rateTolerance: {tolerance:g} items at {spi:g} samples per insert leaves "
                f"no room for a batch of {batch} and messages of {message} item(s) "
                f"(agents.flushIteration); use at least {(batch / spi + message) / 2:g}"
            )

    def component_resources(self, component: str) -> Resources:
        """Resources of a component, the spec's own or the built-in default."""
        return (
            self.resources.get(component)
            or {**_default_resources(), **_shard_resources()}[component]
        )


class Metadata(SpecModel):
    """Kubernetes-style metadata: the name is the experiment's identity everywhere."""

    name: str = Field(description="DNS-1035 label; see `surreal-kube config --help`")
    namespace: str | None = Field(None, description="Kubernetes namespace (cluster backends)")
    labels: dict[str, str] = Field(default_factory=dict, max_length=64, description="extra labels")


class Experiment(SpecModel):
    """The whole document: `apiVersion`, `kind`, `metadata`, `spec`."""

    api_version: Literal["surreal.ai/v1alpha1"] = Field(API_VERSION, alias="apiVersion")
    kind: Literal["Experiment"] = Field(KIND)
    metadata: Metadata
    spec: ExperimentSpec = Field(default_factory=ExperimentSpec)
    _topology: tuple[ExperimentSpec, str, Topology] | None = PrivateAttr(None)

    @property
    def topology(self) -> Topology:
        """The process graph, built once per experiment (validation builds it first).

        Every layer below the resolve reads this; none rebuilds it. The models are frozen, so the
        graph can only go stale through `model_copy(update=...)`, which shares the private cache:
        the cache remembers which spec object and name it was built for and is rebuilt, once,
        for a copy with another."""
        cached = self._topology
        if cached is not None and cached[0] is self.spec and cached[1] == self.metadata.name:
            return cached[2]
        topo = build_topology(self.metadata.name, self.spec)
        self._topology = (self.spec, self.metadata.name, topo)
        return topo

    def with_images(self, images: Mapping[str, ImageSpec]) -> Experiment:
        """A copy with these `spec.images` entries replaced (pinning a plan's references).

        Images are not part of the process graph, so the copy keeps this topology; the entries
        are models, already validated, so nothing else of the spec is checked again."""
        spec = self.spec.model_copy(update={"images": {**self.spec.images, **images}})
        copied = self.model_copy(update={"spec": spec})
        copied._topology = (spec, self.metadata.name, self.topology)
        return copied
