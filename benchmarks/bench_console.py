"""Cost of the console's audit review page against the library it is built on.

A home with N audit records (a run's typical mix, one protected-read attempt in 50). Baseline:
what ``audit show`` and ``audit check`` do with the same log (read and parse every record,
filter, run the protected-path check, serialise the payloads). Measured: a full
``GET /audit`` through the real app (auth, verify banner, filters, findings, escaping,
rendering), unfiltered and filtered to one actor. Median of R requests each.

    .venv/bin/python benchmarks/bench_console.py [N] [R]
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fastapi.testclient import TestClient  # noqa: E402

from audit import AuditLog, MemoryAnchorStore, check_records, iter_records, load_policy, select  # noqa: E402
from console import Auth, create_app  # noqa: E402
from segfactory.home import Home  # noqa: E402


def _fill(log: AuditLog, n: int) -> None:
    for i in range(n):
        if i % 50 == 0:
            log.append(
                "sandbox", "protected_read_attempt", {"path": "/vault/confirm-a/labels.npy"}, run_id="r1"
            )
        else:
            log.append(
                "runner",
                "ticket_progress",
                {"ticket_id": f"r1-t{i:04d}", "epoch": i % 7, "note": "<b>x</b> \x1b[31m"},
                run_id="r1",
            )


def _median(fn: Callable[[], object], reps: int) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(n: int, reps: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = Home(Path(tmp) / "home")
        anchor = MemoryAnchorStore()
        with AuditLog(home, anchor) as log:
            _fill(log, n)
            log.flush_anchor()
            policy = load_policy()

            def baseline() -> None:
                records = list(select(iter_records(home.audit / "log.jsonl")))
                check_records(records, policy, home.root)
                [json.dumps(r.payload, indent=2) for r in records]

            app = create_app(home, log, auth=Auth("t"), anchor=lambda: (anchor.get(), True))
            with TestClient(app, base_url="http://127.0.0.1") as client:
                client.get("/login", params={"token": "t"})
                assert client.get("/audit").status_code == 200
                base = _median(baseline, reps)
                page = _median(lambda: client.get("/audit"), reps)
                filtered = _median(lambda: client.get("/audit", params={"actor": "sandbox"}), reps)
    sys.stdout.write(
        f"records {n}, median of {reps}\n"
        f"baseline (parse + select + check + serialise): {base * 1000:.1f} ms\n"
        f"GET /audit (500 rows shown): {page * 1000:.1f} ms  ratio {page / base:.2f}x\n"
        f"GET /audit?actor=sandbox: {filtered * 1000:.1f} ms  ratio {filtered / base:.2f}x\n"
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5000, int(sys.argv[2]) if len(sys.argv) > 2 else 5)
