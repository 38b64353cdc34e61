"""Recording episodes to mp4 without slowing the environment down.

Frames go through a queue to a background thread that feeds ffmpeg (through imageio); the encoder
runs in ffmpeg's own process, so the stepping thread only pays for `render()` and a queue put.
`stop_record` sends an end-of-video marker, then waits for the writer to flush the file and exit.
"""

from __future__ import annotations

import importlib.util
import queue
import threading
from pathlib import Path
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

_END = None
VIDEO_MODULES = ("imageio", "imageio_ffmpeg")
"""What writing mp4 needs: the `video` extra (`pip install 'surreal-kube[video]'`)."""


def missing_video_modules() -> list[str]:
    """The modules of `VIDEO_MODULES` that cannot be imported here."""
    missing = []
    for name in VIDEO_MODULES:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # ValueError: in sys.modules as None (blocked)
            found = False
        if not found:
            missing.append(name)
    return missing


class VideoRecorder(gym.Wrapper):
    """Records rendered frames to mp4 between `start_record(path)` and `stop_record()`."""

    def __init__(self, env: gym.Env, fps: int | None = None, max_queue: int = 256) -> None:
        super().__init__(env)
        if env.render_mode != "rgb_array":
            raise ValueError("video recording needs the env made with render_mode='rgb_array'")
        # said when the recorder is made (a role's start), not in the writer thread mid-run
        if missing := missing_video_modules():
            raise ValueError(
                f"video recording needs {', '.join(missing)}, which the `video` extra installs: "
                "pip install 'surreal-kube[video]'"
            )
        self.fps = fps or int(env.metadata.get("render_fps", 30))
        self._max_queue = max_queue
        self._queue: queue.Queue[np.ndarray | None] | None = None
        self._thread: threading.Thread | None = None
        self._path: Path | None = None
        self._error: BaseException | None = None
        self.frames_written = 0

    @property
    def recording(self) -> bool:
        """Whether frames are currently being recorded."""
        return self._thread is not None

    def start_record(self, path: str | Path) -> None:
        """Start a new video file (stopping any current one first)."""
        if self.recording:
            self.stop_record()
        self._path = Path(path)
        self._path.parent.mkdir(parents=True, exist_ok=True)
        self._queue = queue.Queue(maxsize=self._max_queue)
        self._error = None
        self.frames_written = 0
        self._thread = threading.Thread(
            target=self._write, args=(self._path, self._queue), name="video-writer", daemon=True
        )
        self._thread.start()
        self._capture()

    def stop_record(self) -> Path | None:
        """Flush and close the current video; returns its path (None if not recording)."""
        if self._thread is None or self._queue is None:
            return None
        self._queue.put(_END)
        self._thread.join()
        self._thread = None
        self._queue = None
        if self._error is not None:
            raise RuntimeError(f"writing video {self._path} failed: {self._error}") from self._error
        return self._path

    def _write(self, path: Path, frames: queue.Queue[np.ndarray | None]) -> None:
        import imageio.v2 as imageio

        writer = None
        try:
            writer = imageio.get_writer(str(path), fps=self.fps, macro_block_size=1)
            while (frame := frames.get()) is not _END:
                writer.append_data(frame)
                self.frames_written += 1
        except BaseException as exc:  # reported by stop_record
            self._error = exc
            while frames.get() is not _END:  # keep draining so the stepping thread never blocks
                pass
        finally:
            if writer is not None:
                writer.close()

    def _capture(self) -> None:
        if self._queue is not None:
            self._queue.put(np.asarray(self.env.render(), dtype=np.uint8))

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        out = self.env.reset(**kwargs)
        self._capture()
        return out

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        out = self.env.step(action)
        self._capture()
        return out

    def close(self) -> None:
        self.stop_record()
        super().close()
