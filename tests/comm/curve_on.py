"""`pytest -p tests.comm.curve_on <tests>`: run tests with CURVE on, as an experiment runs.

Installs one fresh keypair in the test process (every socket `make_socket` makes is then a CURVE
socket) and writes it into each `tests.runtime.harness.LocalRun` folder, where the role
processes the harness starts find it (`RoleContext.curve_key_file`). Not loaded by default:
the suite's own CURVE tests are in tests/comm/test_curve.py; this checks that the rest of the
comm and runtime tests pass unchanged with CURVE on.
"""

from __future__ import annotations

from typing import Any

import pytest

from surreal_kube.comm import curve
from surreal_kube.launch.keys import write_keys

_keys = curve.generate()


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Again before each test: one that runs `runtime.main.main` in this process installed
    the keys of its own folder (none), as a role process does."""
    curve.install(_keys)


def pytest_configure(config: pytest.Config) -> None:
    keys = _keys
    curve.install(keys)
    from tests.runtime import harness

    original = harness.LocalRun.__init__

    def keyed_init(self: harness.LocalRun, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        write_keys(self.dir, curve.dumps(keys))

    harness.LocalRun.__init__ = keyed_init  # type: ignore[method-assign]


def pytest_report_header(config: pytest.Config) -> str:
    return "CURVE on: every socket of the tests and of the roles they start (tests.comm.curve_on)"
