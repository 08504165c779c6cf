"""`segfactory console` as a user starts it: a login link on stdout, loopback only, token required."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.conftest import REPO
from tests.console.test_browser import _free_port


def test_console_prints_a_login_link_and_guards_every_page(tmp_home: Path) -> None:
    port = _free_port()
    env = {**os.environ, "SEGFACTORY_CONSOLE_TOKEN": ""}
    proc = subprocess.Popen([sys.executable, "-m", "segfactory", "console", "--home", str(tmp_home),
                             "--port", str(port)], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
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
        with httpx.Client(base_url=base, timeout=5) as person:
            assert person.get("/login", params={"token": link.group(2)}).status_code == 200  # redirected to /
            assert "Runs" in person.get("/").text
        for line in open(f"/proc/net/tcp").read().splitlines()[1:]:  # bound to 127.0.0.1 only
            local = line.split()[1]
            if int(local.split(":")[1], 16) == port:
                assert local.split(":")[0] == "0100007F"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
