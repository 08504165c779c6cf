"""`segfactory console` as a user starts it: a login link on stdout, loopback only, token required."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO
from tests.console.test_browser import _free_port


@pytest.mark.slow
def test_console_prints_a_login_link_and_guards_every_page(tmp_home: Path) -> None:
    port = _free_port()
    env = {**os.environ, "SEGFACTORY_CONSOLE_TOKEN": ""}
    proc = subprocess.Popen(
        [sys.executable, "-m", "segfactory", "console", "--home", str(tmp_home), "--port", str(port)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline(), proc.stdout.readline()]
        link = re.search(r"http://127\.0\.0\.1:(\d+)/login\?token=(\S+)", lines[1])
        assert link and int(link.group(1)) == port, lines
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                anonymous = httpx.get(f"{base}/", timeout=2)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the console did not start listening"
                time.sleep(0.1)
        assert anonymous.status_code == 401
        with httpx.Client(base_url=base, timeout=5, follow_redirects=True) as person:
            assert person.get("/login", params={"token": link.group(2)}).status_code == 200  # redirected to /
            assert "Runs" in person.get("/").text
        rows = [line.split()[1].split(":") for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
        bound = {addr for addr, p in rows if int(p, 16) == port}
        assert bound == {"0100007F"}, bound  # listening on 127.0.0.1 only
    finally:
        proc.terminate()
        proc.wait(timeout=10)
