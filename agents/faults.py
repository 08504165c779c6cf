"""Test-only fault injection for the loop: a kill -9 at a named point of a real run."""

from __future__ import annotations

import logging
import os
import signal

log = logging.getLogger(__name__)

KILL_AT_ENV = "SEGFACTORY_TEST_KILL_AT"  # the point at which the run kills itself (tests only)


def fault_point(name: str) -> None:
    """Test-only: SIGKILL this (host-side graph) process when ``$SEGFACTORY_TEST_KILL_AT`` is ``name``.

    It lets the end-to-end resume tests kill a real ``segfactory run`` at a point no outside
    signal can hit deterministically. Only this process reads the variable; sandboxes start with
    a cleared environment, so it never reaches agent code.
    """
    if os.environ.get(KILL_AT_ENV) == name:
        log.warning("%s=%s: kill -9 of this process (test-only fault injection)", KILL_AT_ENV, name)
        os.kill(os.getpid(), signal.SIGKILL)


__all__ = ["KILL_AT_ENV", "fault_point"]
