"""In-sandbox audit hook (PEP 578): file opens under watched prefixes, appended to a JSONL file.

Sandbox-reported and never relied on: code inside can skip it (``python -S``/``-I``), remove the
file, or lie. The host's inotify watch on the decoys is the evidence.
"""

import json
import os
import sys
import time

_FILE = os.environ.get("SEGFACTORY_HOOK_FILE", "")
_PREFIXES = tuple(p for p in os.environ.get("SEGFACTORY_HOOK_PREFIXES", "").split(":") if p)
_MAX = 1000  # events written per process


def _install() -> None:
    state: dict = {"n": 0, "busy": False}

    def hook(event: str, args: tuple) -> None:
        if event != "open" or state["busy"] or state["n"] >= _MAX or not args:
            return
        path = args[0]
        if not isinstance(path, str) or not path.startswith(_PREFIXES):
            return
        state["busy"], state["n"] = True, state["n"] + 1
        try:
            with open(_FILE, "a") as handle:
                handle.write(json.dumps({"ts": time.time(), "path": path, "mode": str(args[1])}) + "\n")
        except OSError:
            pass
        finally:
            state["busy"] = False

    sys.addaudithook(hook)


if _FILE and _PREFIXES:
    _install()
