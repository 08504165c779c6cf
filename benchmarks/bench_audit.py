"""Audit appends per second with fsync, against a bare append+fsync loop of lines of the same size.

The ratio (bare / audit time per record) is the writer's overhead: the lock, the tail check,
the record model, hashing and canonical JSON. Both write to the same file system (a temporary
directory, or BENCH_DIR) in the same run.

    .venv/bin/python benchmarks/bench_audit.py [N]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from audit import AuditLog, MemoryAnchorStore  # noqa: E402
from segfactory.home import Home  # noqa: E402

N_DEFAULT = 2000
ROUNDS = 10  # audit and bare chunks alternate, so disk contention from other tenants hits both alike
PAYLOAD = {
    "tool": "run",
    "args": {"cmd": "python -m vision.train --config /work/config.yaml"},
    "ticket": "t-001",
}


def audit_chunk(log: AuditLog, start: int, n: int) -> float:
    """Seconds for n appends (a memory anchor every batch, as in a run)."""
    t0 = time.perf_counter()
    for i in range(start, start + n):
        log.append("code-agent", "tool_call", {**PAYLOAD, "i": i}, run_id="bench")
    return time.perf_counter() - t0


def bare_chunk(fd: int, n: int, line: bytes) -> float:
    """Seconds for n writes of ``line`` to an O_APPEND file, each followed by fsync."""
    t0 = time.perf_counter()
    for _ in range(n):
        os.write(fd, line)
        os.fsync(fd)
    return time.perf_counter() - t0


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else N_DEFAULT
    chunk = max(1, n // ROUNDS)
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        log = AuditLog(Home(Path(tmp) / "home"), MemoryAnchorStore())
        audit_s = audit_chunk(log, 0, chunk)
        line_size = log.path.stat().st_size // chunk
        line = b"x" * (line_size - 1) + b"\n"
        fd = os.open(Path(tmp) / "bare.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        bare_s = bare_chunk(fd, chunk, line)
        for r in range(1, ROUNDS):
            audit_s += audit_chunk(log, r * chunk, chunk)
            bare_s += bare_chunk(fd, chunk, line)
        os.close(fd)
        log.close()
    total = chunk * ROUNDS
    print(
        f"audit appends: {total / audit_s:,.0f}/s "
        f"({audit_s / total * 1e6:.0f} us each, {line_size} B lines, fsync each)"
    )
    print(f"bare append+fsync: {total / bare_s:,.0f}/s ({bare_s / total * 1e6:.0f} us each)")
    print(f"ratio audit/bare time per record: {audit_s / bare_s:.2f}")


if __name__ == "__main__":
    main()
