"""Video recording in a background writer that stop_record flushes and joins."""

import imageio.v2 as imageio
import pytest

from surreal_kube.envs import make_env
from tests.isolation import run_isolated


def test_records_an_mp4_with_every_frame(tmp_path):
    run_isolated(_record_checks, tmp_path)  # renders with EGL: see tests/isolation.py


def _record_checks(tmp_path):
    env = make_env("gym:InvertedPendulum-v5", record_video=True, width=64, height=48)
    env.reset(seed=0)
    path = tmp_path / "videos" / "episode.mp4"
    env.start_record(path)
    steps = 20
    for _ in range(steps):
        env.step(env.action_space.sample() * 0)
    assert env.recording
    out = env.stop_record()
    assert out == path and not env.recording
    assert env.frames_written == steps + 1  # the frame at start plus one per step
    reader = imageio.get_reader(str(path))
    frames = list(reader.iter_data())
    reader.close()
    assert len(frames) == steps + 1
    assert frames[0].shape == (48, 64, 3)
    env.close()


def test_needs_rgb_array_rendering():
    from surreal_kube.envs.video import VideoRecorder

    with pytest.raises(ValueError, match="rgb_array"):
        VideoRecorder(make_env("gym:Pendulum-v1"))


def test_without_the_video_extra_says_which_extra_to_install(monkeypatch):
    """imageio is the `video` extra's: an environment without it is refused when the recorder is
    made (a role's start), not by the writer thread in the middle of a run."""
    import sys

    monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)  # as if it was not installed
    with pytest.raises(ValueError) as err:
        make_env("gym:Pendulum-v1", record_video=True)
    assert str(err.value) == (
        "video recording needs imageio_ffmpeg, which the `video` extra installs: "
        "pip install 'surreal-kube[video]'"
    )
