"""Building environments from an experiment's `env` section, and checking them before a run.

Environment ids carry a backend prefix (`gym:Ant-v5`) so other backends can be added without
ambiguity. An environment of the user's own package is `gym:<module>:<id>` (gymnasium's form): the
module, imported by `gymnasium.make` in each process, registers the id.

`check_env` is what the launcher calls before starting any process: an unknown id, a
missing MuJoCo, pixels that cannot be rendered or an action space the algorithm cannot drive become
one clear `SpecError` at `create` time instead of a crash in every agent.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

import gymnasium as gym

from surreal_kube.envs.ids import FORM, PREFIXES, check_env_id, quiet_gymnasium
from surreal_kube.envs.video import VideoRecorder
from surreal_kube.envs.wrappers import ActionRepeat, FrameStack, ObservationDict
from surreal_kube.errors import SpecError

if TYPE_CHECKING:
    from surreal_kube.experiment.spec import EnvSpec

DEFAULT_PIXEL_SIZE = 84


def parse_env_id(env_id: str) -> tuple[str, str]:
    """'gym:Ant-v5' -> ('gym', 'Ant-v5'); anything else is a SpecError."""
    prefix, sep, name = env_id.partition(":")
    if not sep or prefix not in PREFIXES or not name:
        raise SpecError(f"environment id {env_id!r} must look like {FORM}")
    return prefix, name


def _use_headless_gl() -> None:
    # MuJoCo picks its GL backend on first use; without a display only EGL (or OSMesa) can work.
    if not os.environ.get("DISPLAY"):
        os.environ.setdefault("MUJOCO_GL", "egl")


def _is_mujoco(name: str) -> bool:
    # `mypkg.envs:Tiny-v0`: gymnasium.make imports the module; its spec is under the bare id.
    module, _, gym_id = name.rpartition(":")
    if module:
        importlib.import_module(module)
    entry = gym.spec(gym_id).entry_point
    return "mujoco" in str(entry)


def _options(env: EnvSpec | str, overrides: dict[str, Any]) -> dict[str, Any]:
    if isinstance(env, str):
        opts: dict[str, Any] = {"id": env, "kwargs": {}}
    else:
        opts = {
            "id": env.id,
            "kwargs": dict(env.kwargs),
            "max_episode_steps": env.max_episode_steps,
            "frame_stack": env.frame_stack,
            "pixel": env.pixel,
            "action_repeat": env.action_repeat,
        }
    for key in ("max_episode_steps", "frame_stack", "pixel", "action_repeat", "low_dim"):
        if key in overrides:
            opts[key] = overrides.pop(key)
    opts["kwargs"].update(overrides)
    return opts


def make_env(
    env: EnvSpec | str,
    *,
    render_mode: str | None = None,
    record_video: bool = False,
    **kwargs: Any,
) -> gym.Env:
    """A gymnasium environment with the experiment's wrappers.

    Args:
        env: an `EnvSpec` or an id such as "gym:CartPole-v1".
        render_mode: passed to gymnasium ("rgb_array" for frames); pixels and video imply it.
        record_video: wrap in `VideoRecorder` (outermost, so `start_record` / `stop_record` are
            methods of the returned env).
        kwargs: `max_episode_steps`, `frame_stack`, `pixel`, `action_repeat`, `low_dim` (keep the
            state next to pixels) override the spec; anything else goes to `gymnasium.make`.

    Wrapper order, inside out: gymnasium's own (incl. the time limit), action repeat, observation
    dict with pixels, frame stack, video recorder. Episodes are seeded by the caller's first
    `reset(seed=...)`, as gymnasium intends.
    """
    opts = _options(env, dict(kwargs))
    _, name = parse_env_id(opts["id"])
    pixel = bool(opts.get("pixel", False))
    make_kwargs = dict(opts["kwargs"])
    if pixel or record_video:
        render_mode = "rgb_array"
    if render_mode is not None:
        _use_headless_gl()
        make_kwargs["render_mode"] = render_mode
        if pixel and _is_mujoco(name):
            make_kwargs.setdefault("width", DEFAULT_PIXEL_SIZE)
            make_kwargs.setdefault("height", DEFAULT_PIXEL_SIZE)
    if opts.get("max_episode_steps"):
        make_kwargs["max_episode_steps"] = opts["max_episode_steps"]
    with quiet_gymnasium():
        out = gym.make(name, **make_kwargs)
    if opts.get("action_repeat", 1) > 1:
        out = ActionRepeat(out, opts["action_repeat"])
    if pixel:
        out = ObservationDict(out, pixel=pixel, low_dim=bool(opts.get("low_dim", False)))
    if opts.get("frame_stack", 1) > 1:
        out = FrameStack(out, opts["frame_stack"])
    if record_video:
        out = VideoRecorder(out)
    return out


def env_spaces(env: EnvSpec | str, **kwargs: Any) -> tuple[gym.Space, gym.Space]:
    """(observation_space, action_space) of the wrapped environment (made and closed)."""
    instance = make_env(env, **kwargs)
    try:
        return instance.observation_space, instance.action_space
    finally:
        instance.close()


def check_env(env: EnvSpec | str, algorithm: str | None = None) -> tuple[gym.Space, gym.Space]:
    """Fail early with a SpecError when the environment cannot be used; returns its spaces.

    Checks, in order: the id's form, that gymnasium knows the id (with a suggestion when it does
    not), that MuJoCo imports for MuJoCo tasks, that the environment builds, resets and (for pixel
    observations) renders, and that `algorithm` ("ppo" / "ddpg") can drive its action space.
    """
    env_id = env if isinstance(env, str) else env.id
    check_env_id(env_id)  # the registry: one message, one suggestion
    _, name = parse_env_id(env_id)
    if _is_mujoco(name):
        try:
            import mujoco  # noqa: F401
        except ImportError as exc:
            raise SpecError(
                f"environment {env_id!r} needs MuJoCo, which is not installed "
                "(pip install 'gymnasium[mujoco]')"
            ) from exc
    try:
        with quiet_gymnasium(keep_deprecations=False):  # check_env_id's caller shows those
            instance = make_env(env)
        try:
            instance.reset(seed=0)
            obs_space, action_space = instance.observation_space, instance.action_space
        finally:
            instance.close()
    except SpecError:
        raise
    except Exception as exc:
        raise SpecError(f"environment {env_id!r} could not be created: {exc}") from exc
    if algorithm == "ddpg" and not (
        isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1
    ):
        raise SpecError(f"ddpg needs continuous (Box) actions; {env_id!r} has {action_space}")
    if algorithm == "ppo" and not isinstance(action_space, gym.spaces.Box | gym.spaces.Discrete):
        raise SpecError(f"ppo needs Box or Discrete actions; {env_id!r} has {action_space}")
    return obs_space, action_space
