"""Run inside a sandbox by ``sandbox verify`` (stdlib only): report what this process can see.

Usage: python -I probe.py CANARY_NAME CANARY_SIZE CANARY_SHA256 DECOY_PATH
Prints one JSON object. The canary is searched for by name everywhere and by content in every
regular file of exactly its size (a bind mount of it keeps its size), /proc and /sys excepted.
"""

import hashlib
import json
import os
import resource
import socket
import sys

SKIP = ("/proc", "/sys", "/dev")


def status_fields() -> dict:
    out = {}
    with open("/proc/self/status") as handle:
        for line in handle:
            key, _, value = line.partition(":")
            if key.startswith("Cap") or key in ("NoNewPrivs", "Seccomp", "Uid", "Gid"):
                out[key] = value.strip()
    return out


def find_canary(name: str, size: int, digest: str) -> tuple:
    hits, scanned = [], 0
    for root, dirs, files in os.walk("/", followlinks=False):
        dirs[:] = [d for d in dirs if os.path.join(root, d) not in SKIP]
        for fname in files:
            path = os.path.join(root, fname)
            scanned += 1
            if fname == name:
                hits.append(path)
                continue
            try:
                st = os.lstat(path)
                if st.st_size == size and os.path.isfile(path) and not os.path.islink(path):
                    with open(path, "rb") as handle:
                        if hashlib.sha256(handle.read()).hexdigest() == digest:
                            hits.append(path)
            except OSError:
                continue
    return hits, scanned


def interfaces() -> list:
    with open("/proc/net/dev") as handle:
        return [line.split(":")[0].strip() for line in handle.readlines()[2:]]


def network_reach() -> dict:
    results = {}
    for host, port in (("10.0.0.1", 80), ("1.1.1.1", 53), ("172.17.0.1", 2375)):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.settimeout(1.0)
        try:
            sock.connect((host, port))
            results[f"{host}:{port}"] = "connected"
        except OSError as exc:
            results[f"{host}:{port}"] = type(exc).__name__
        finally:
            sock.close()
    return results


def rlimits() -> dict:
    names = ("RLIMIT_FSIZE", "RLIMIT_CORE", "RLIMIT_NOFILE", "RLIMIT_DATA", "RLIMIT_NPROC")
    return {n: list(resource.getrlimit(getattr(resource, n))) for n in names}


def cgroup_limits() -> dict:
    found = {}
    for key, path in (
        ("memory", "/sys/fs/cgroup/memory/memory.limit_in_bytes"),
        ("memsw", "/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes"),
        ("pids", "/sys/fs/cgroup/pids/pids.max"),
        ("memory", "/sys/fs/cgroup/memory.max"),
        ("pids", "/sys/fs/cgroup/pids.max"),
    ):
        try:
            with open(path) as handle:
                found[key] = handle.read().strip()
        except OSError:
            continue
    return found


CLONE_NEWUSER = 0x10000000


def user_namespaces() -> dict:
    """Whether this process can make a user namespace: by `unshare -r true`, and by the raw
    unshare(2) call in a forked child (so the probe itself stays where it is)."""
    import ctypes
    import subprocess

    out: dict = {}
    try:
        proc = subprocess.run(["unshare", "-r", "true"], capture_output=True, timeout=10)
        out["unshare_r"] = {"exit": proc.returncode, "stderr": proc.stderr.decode(errors="replace")[-200:]}
    except (OSError, subprocess.SubprocessError) as exc:
        out["unshare_r"] = {"exit": None, "stderr": type(exc).__name__}
    pid = os.fork()
    if pid == 0:
        libc = ctypes.CDLL(None, use_errno=True)
        os._exit(0 if libc.unshare(CLONE_NEWUSER) == 0 else 1)
    out["syscall_ok"] = os.waitpid(pid, 0)[1] == 0
    return out


def gpus() -> dict:
    """The NVIDIA GPU nodes visible here (by minor), the driver's model for each, and the
    CUDA_VISIBLE_DEVICES this process was given."""
    models = {}
    root = "/proc/driver/nvidia/gpus"
    for bus in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        try:
            with open(os.path.join(root, bus, "information")) as handle:
                fields = dict(line.split(":", 1) for line in handle.read().splitlines() if ":" in line)
            models[int(fields["Device Minor"].strip())] = fields.get("Model", "?").strip()
        except (OSError, KeyError, ValueError):
            continue
    visible = sorted(int(n[6:]) for n in os.listdir("/dev") if n.startswith("nvidia") and n[6:].isdigit())
    return {
        "visible": visible,
        "models": {str(m): models.get(m, "?") for m in visible},
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }


def main() -> None:
    name, size, digest, decoy = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    with open("/proc/self/mountinfo") as handle:
        mountinfo = handle.read().splitlines()
    hits, scanned = find_canary(name, size, digest)
    try:
        with open(decoy, "rb") as handle:  # a deliberate decoy open: the host must see it
            handle.read(16)
        decoy_opened = True
    except OSError:
        decoy_opened = False
    report = {
        "uid": os.getuid(),
        "euid": os.geteuid(),
        "gid": os.getgid(),
        "status": status_fields(),
        "mountinfo": mountinfo,
        "canary_hits": hits,
        "files_scanned": scanned,
        "interfaces": interfaces(),
        "network": network_reach(),
        "docker_socket": [p for p in ("/var/run/docker.sock", "/run/docker.sock") if os.path.lexists(p)],
        "rlimits": rlimits(),
        "cgroup": cgroup_limits(),
        "decoy_opened": decoy_opened,
        "root_writable": os.access("/", os.W_OK),
        "cwd": os.getcwd(),
        "userns": user_namespaces(),
        "gpus": gpus(),
    }
    sys.stdout.write(json.dumps(report) + "\n")


main()
