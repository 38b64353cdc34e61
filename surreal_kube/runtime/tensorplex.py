"""Role `tensorplex`: receives scalars from every role and writes TensorBoard event files.

One TensorBoard run (a folder under `<experiment>/tensorboard/`) per source process: `learner`,
`replay-shard-0`, `ps-shard-1`... Indexed sources are binned, so a fleet of agents stays readable:
agent i's scalars are averaged with those of the other agents of its bin into run
`agents/<lo>-<hi>` (bins of `session.metrics.agentBinSize` ids), evals likewise into `evals/...`.
A bin is written once per `FLUSH_SECONDS` with the mean of the values it received and the largest
step reported.

Event files are written with the `tensorboard` package's own writer (no TensorFlow, no torch), and
everything received is validated first: a source name becomes a folder name, so it must be a plain
DNS-style label. A write that fails (a full disk) never ends tensorplex: the points are dropped
and counted (`tensorplex/dropped_points`), the failure is logged once, and the run's event file is
replaced by a new one (the old may end in a torn record) when writing is tried again,
`RETRY_SECONDS` later; so a run whose disk filled up still ends with its results once there is
space again.

On Kubernetes it also keeps the experiment's progress record (learner iteration, env steps,
steps/s, last eval return) and writes it into the ConfigMap `<exp>-progress` (runtime/reporter.py):
the channel `status`, `list` and the operator read. And it conducts the run's end there
(runtime/conductor.py): the curve, the budget, the final evaluation, the results and the release
of the experiment's compute; locally the supervisor does that.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import zmq
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from surreal_kube.comm import wire
from surreal_kube.comm.sockets import drain, make_socket, take_waiting
from surreal_kube.runtime.base import RoleBase, topology_sources
from surreal_kube.runtime.conductor import Conductor
from surreal_kube.runtime.context import RoleContext
from surreal_kube.runtime.lifecycle import Every, RateMeter, StopFlag
from surreal_kube.runtime.reporter import ConfigMapWriter, ProgressTracker, Reporter

log = logging.getLogger(__name__)

FLUSH_SECONDS = 2.0
RETRY_SECONDS = 5.0
"""Seconds between attempts to write event files again after a write failed."""
MAX_TAGS = 512
_SOURCE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_TAG = re.compile(r"^[\w./-]{1,200}$")
INDEXED_GROUPS = ("agents", "evals")


class InvalidScalars(wire.WireError):
    """A scalars message whose metadata breaks the rules above."""


def parse_scalars(
    meta: dict[str, Any],
) -> tuple[str, str | None, int | None, int | None, float, dict[str, float]]:
    """Check a scalars message: (source, group, index, step, time, values) or InvalidScalars."""
    src, grp, idx, step, stamp, vals = (
        meta.get(k) for k in ("src", "grp", "idx", "step", "t", "vals")
    )
    if not isinstance(src, str) or not _SOURCE.match(src):
        raise InvalidScalars("bad-meta", f"source {str(src)[:70]!r}")
    if grp is not None and grp not in INDEXED_GROUPS:
        raise InvalidScalars("bad-meta", f"group {str(grp)[:40]!r}")
    if grp is not None and (
        not isinstance(idx, int) or isinstance(idx, bool) or not 0 <= idx < 1 << 20
    ):
        raise InvalidScalars("bad-meta", "index")
    if step is not None and (not isinstance(step, int) or isinstance(step, bool) or step < 0):
        raise InvalidScalars("bad-meta", "step")
    if not isinstance(stamp, (int, float)) or isinstance(stamp, bool) or not math.isfinite(stamp):
        raise InvalidScalars("bad-meta", "time")
    if not isinstance(vals, dict) or not 0 < len(vals) <= MAX_TAGS:
        raise InvalidScalars("bad-meta", "values")
    values: dict[str, float] = {}
    for tag, value in vals.items():
        if not isinstance(tag, str) or not _TAG.match(tag) or ".." in tag:
            raise InvalidScalars("bad-meta", f"tag {str(tag)[:40]!r}")
        if (
            not isinstance(value, (int, float))
            or isinstance(value, bool)
            or not math.isfinite(value)
        ):
            raise InvalidScalars("bad-meta", f"value of {tag!r}")
        values[tag] = float(value)
    return src, grp, idx if grp is not None else None, step, float(stamp), values


def check_source(
    src: str, grp: str | None, idx: int | None, sources: frozenset[str], counts: dict[str, int]
) -> None:
    """InvalidScalars unless `src` is a process of the topology and an indexed group's index
    one of its members (agent ids below `agents.count`, eval indices below `evals.count`)."""
    if src not in sources:
        raise InvalidScalars("unknown-source", f"{src!r} is not a process of this experiment")
    if grp is not None and (
        not src.startswith(f"{grp}-") or idx is None or not 0 <= idx < counts.get(grp, 0)
    ):
        raise InvalidScalars("unknown-source", f"{src!r} has no member {idx} of {grp!r}")


def bin_name(group: str, index: int, bin_size: int, count: int | None = None) -> str:
    """`agents`, 11, 8 -> `agents/8-15` (the last bin ends at `count - 1` when given)."""
    lo = index // bin_size * bin_size
    hi = lo + bin_size - 1
    if count is not None and count > 0:
        hi = min(hi, max(count - 1, lo))
    return f"{group}/{lo}-{hi}"


class ScalarWriter:
    """Event files per run, plus the bins' running means."""

    def __init__(self, logdir: Path) -> None:
        self.logdir = logdir
        self._writers: dict[str, EventFileWriter] = {}
        self._steps: dict[str, int] = defaultdict(int)
        # run -> tag -> [sum, count, max step, last time]
        self._bins: dict[str, dict[str, list[float]]] = defaultdict(dict)
        self.points = 0
        self.dropped = 0
        """Points not written because the disk refused them."""
        self.failures = 0
        """Write failures (each one drops a writer and its unwritten points)."""
        self._retry_at: float | None = None
        """Monotonic time before which no write is tried (after a failure)."""
        self._fault: str | None = None

    def _failed(self, run: str, exc: OSError, points: int) -> None:
        """A write to `run` failed: drop its writer (a new file next time), wait, say it once."""
        self.dropped += points
        self.failures += 1
        writer = self._writers.pop(run, None)
        if writer is not None:
            _discard(writer)
        self._retry_at = time.monotonic() + RETRY_SECONDS
        if self._fault is None:
            log.warning(
                "cannot write TensorBoard events under %s (%s): dropping points, "
                "trying again every %.0f s",
                self.logdir,
                exc,
                RETRY_SECONDS,
            )
        self._fault = str(exc)

    def _writer(self, run: str) -> EventFileWriter:
        writer = self._writers.get(run)
        if writer is None:
            path = self.logdir / run
            path.mkdir(parents=True, exist_ok=True)
            writer = EventFileWriter(str(path), flush_secs=FLUSH_SECONDS)
            self._writers[run] = writer
        return writer

    def write(self, run: str, values: dict[str, float], step: int | None, stamp: float) -> None:
        """Write one point per tag now (step: the given one, else a per-run counter)."""
        if step is None:
            step = self._steps[run]
            self._steps[run] += 1
        if self._retry_at is not None and time.monotonic() < self._retry_at:
            self.dropped += len(values)
            return
        summary = summary_pb2.Summary(
            value=[summary_pb2.Summary.Value(tag=t, simple_value=v) for t, v in values.items()]
        )
        event = event_pb2.Event(wall_time=stamp, step=step, summary=summary)
        try:
            self._writer(run).add_event(event)
        except OSError as exc:
            self._failed(run, exc, len(values))
            return
        self.points += len(values)

    def accumulate(
        self, run: str, values: dict[str, float], step: int | None, stamp: float
    ) -> None:
        """Add to a bin's running mean (written by `flush_bins`)."""
        acc = self._bins[run]
        for tag, value in values.items():
            entry = acc.setdefault(tag, [0.0, 0.0, -1.0, stamp])
            entry[0] += value
            entry[1] += 1
            entry[2] = max(entry[2], -1.0 if step is None else float(step))
            entry[3] = max(entry[3], stamp)

    def flush_bins(self) -> None:
        """Write each bin's means since the last flush."""
        for run, acc in self._bins.items():
            by_step: dict[int | None, dict[str, float]] = defaultdict(dict)
            last = 0.0
            for tag, (total, n, step, stamp) in acc.items():
                by_step[None if step < 0 else int(step)][tag] = total / n
                last = max(last, stamp)
            for at, values in by_step.items():
                self.write(run, values, at, last)
        self._bins.clear()

    def flush(self) -> None:
        """Push everything to disk (what the disk refuses is dropped, see `_failed`)."""
        self.flush_bins()
        if self._retry_at is not None and time.monotonic() < self._retry_at:
            return
        failed = False
        for run, writer in list(self._writers.items()):
            try:
                writer.flush()
            except OSError as exc:
                self._failed(run, exc, 0)
                failed = True
        if self._fault is not None and self._writers and not failed:
            log.info("TensorBoard events written again (%d points dropped)", self.dropped)
            self._fault = self._retry_at = None

    def close(self) -> None:
        """Flush and close every event file."""
        self._retry_at = None  # one last try
        self.flush()
        for writer in self._writers.values():
            _discard(writer)
        self._writers.clear()


def _discard(writer: EventFileWriter) -> None:
    """Close an event file writer whose disk may be full (its last flush may fail)."""
    try:
        writer.close()
    except OSError as exc:
        log.debug("closing an event file: %s", exc)


class TensorplexRole(RoleBase):
    """Role `tensorplex`: PULL scalars, write event files."""

    def __init__(self, ctx: RoleContext, stop: StopFlag | None = None) -> None:
        super().__init__(ctx, stop)
        # scalars travel in the header only (comm.metrics): nothing larger is a scalars message
        self.sock = make_socket(
            zmq.PULL,
            bind=ctx.bind("tensorplex"),
            rcvhwm=10_000,
            max_msg_bytes=wire.MAX_HEADER_BYTES,
        )
        self.sources = topology_sources(ctx)
        """The processes of this experiment: scalars from any other name are dropped (a source
        name becomes an event-file folder and counts in the run's progress and its end)."""
        self.writer = ScalarWriter(ctx.folder("tensorboard"))
        self.rejects = wire.Rejects(log)
        self.received = 0
        self._global_step = 0
        """The learner's newest step (global env steps): the step of tensorplex's own scalars."""
        metrics = ctx.spec.session.metrics
        self.bin_size = metrics.agent_bin_size
        self.counts = {"agents": ctx.spec.agents.count, "evals": ctx.spec.evals.count}
        self.progress = ProgressTracker()
        writer = ConfigMapWriter.in_cluster()
        self.conductor: Conductor | None = None
        self.reporter: Reporter | None = None
        if writer is not None:
            self.conductor = Conductor.in_cluster(
                ctx.experiment_doc, self.progress, writer, ctx.folder("results"), ctx.env
            )
            self.reporter = Reporter(self.progress, writer, conductor=self.conductor.step)

    def handle(self, frames: list[Any]) -> None:
        """Validate one message and write or accumulate its scalars."""
        msg = wire.try_decode(
            frames, self.rejects, expect=(wire.SCALARS,), max_bytes=0, where="tensorplex"
        )
        if msg is None:
            return
        try:
            src, grp, idx, step, stamp, values = parse_scalars(msg.meta)
            check_source(src, grp, idx, self.sources, self.counts)
        except InvalidScalars as exc:
            self.rejects.add(exc, "tensorplex")
            return
        self.received += 1
        self.progress.observe(src, grp, idx, step, stamp, values)
        if self.conductor is not None:
            self.conductor.observe(src, grp, idx, step, values)
        if step is not None and src == "learner":
            self._global_step = max(self._global_step, step)
        if grp is not None and idx is not None:
            run = bin_name(grp, idx, self.bin_size, self.counts.get(grp))
            self.writer.accumulate(run, values, step, stamp)
        else:
            self.writer.write(src, values, step, stamp)

    def run(self) -> None:
        """Receive until stopped; flush bins and files every FLUSH_SECONDS."""
        log.info("tensorplex writing to %s", self.writer.logdir)
        flush, rate = Every(FLUSH_SECONDS), RateMeter()
        if self.reporter is not None:
            self.reporter.start()
        while not self.stop.is_set():
            if self.sock.poll(100, zmq.POLLIN):
                take_waiting(self.sock, self.handle)
            if flush():
                self._write_own(rate.rate(self.received))
                self.writer.flush()

    def _write_own(self, messages_per_s: float) -> None:
        self.writer.write(
            "tensorplex",
            {
                "tensorplex/messages_per_s": messages_per_s,
                "tensorplex/rejected_messages": float(self.rejects.total),
                "tensorplex/dropped_points": float(self.writer.dropped),
                "tensorplex/write_failures": float(self.writer.failures),
            },
            self._global_step,
            time.time(),
        )

    def close(self) -> None:
        """Flush and close the event files and the socket."""
        drain(self.sock, self.handle)  # a SIGTERM loses nothing sent just before it
        self._write_own(0.0)
        if self.reporter is not None:
            self.reporter.stop()
        self.writer.close()
        self.sock.close(0)
        super().close()
