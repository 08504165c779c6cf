"""The sandbox image, built without any registry (``docker import`` of a minimal root).

The root holds mount points, ``/usr``-merged symlinks and a minimal ``/etc`` (an unprivileged
user, no secrets) and nothing else: ``/usr`` (coreutils' ``timeout``, the C library), the Python
runtime and the packages come in as read-only bind mounts at run time. Where a registry is
reachable, ``build_image(from_dockerfile=True)`` builds ``sandbox/Dockerfile`` instead.
"""

from __future__ import annotations

import hashlib
import io
import shutil
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from sandbox._layout import BASE_ENV, ETC_FILES
from sandbox._policy import SandboxPolicy
from segfactory.errors import SandboxError

MOUNT_POINTS = ("sbin", "usr", "opt", "data", "work", "run", "proc", "sys", "dev", "vault", "etc")
USR_LINKS = {
    "bin": "usr/bin",
    "lib": "usr/lib",
    "lib64": "usr/lib64",
}  # /sbin stays a dir: docker-init goes there
DOCKERFILE_DIR = Path(__file__).resolve().parent


def _add(tar: tarfile.TarFile, name: str, kind: bytes, mode: int, data: bytes = b"", link: str = "") -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime, info.linkname = kind, mode, 0, link
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data) if data else None)


def rootfs_tar(policy: SandboxPolicy) -> bytes:
    """The image's root as a deterministic tar (same policy, same bytes)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in MOUNT_POINTS:
            _add(tar, name, tarfile.DIRTYPE, 0o755)
        _add(tar, "tmp", tarfile.DIRTYPE, 0o1777)
        for name, target in USR_LINKS.items():
            _add(tar, name, tarfile.SYMTYPE, 0o777, link=target)
        for name, text in ETC_FILES.items():
            _add(
                tar,
                f"etc/{name}",
                tarfile.REGTYPE,
                0o644,
                text.format(uid=policy.uid, gid=policy.gid).encode(),
            )
    return buf.getvalue()


def _build_dockerfile(api: Any, policy: SandboxPolicy, rootfs: bytes) -> None:
    with tempfile.TemporaryDirectory(prefix="segfactory-image-") as context:
        shutil.copy(DOCKERFILE_DIR / "Dockerfile", Path(context) / "Dockerfile")
        (Path(context) / "rootfs.tar").write_bytes(rootfs)
        buildargs = {"UID": str(policy.uid), "GID": str(policy.gid)}
        for item in api.build(path=context, tag=policy.image, rm=True, buildargs=buildargs, decode=True):
            if "error" in item:
                raise SandboxError(f"docker build of {policy.image} failed: {item['error']}")


def build_image(api: Any, policy: SandboxPolicy, *, from_dockerfile: bool = False) -> dict[str, object]:
    """Build (or rebuild) ``policy.image``; returns what was built (id, method, rootfs digest)."""
    start = time.monotonic()
    repository, _, tag = policy.image.partition(":")
    data = rootfs_tar(policy)
    digest = hashlib.sha256(data).hexdigest()
    if from_dockerfile:
        _build_dockerfile(api, policy, data)
        method = "dockerfile"
    else:
        changes = [
            f"USER {policy.uid}:{policy.gid}",
            "WORKDIR /work",
            f"ENV PATH={BASE_ENV['PATH']}",
            f"LABEL segfactory.rootfs={digest}",
        ]
        api.import_image_from_data(data, repository=repository, tag=tag or "latest", changes=changes)
        method = "import"
    image = api.inspect_image(policy.image)
    return {
        "image": policy.image,
        "id": image["Id"],
        "method": method,
        "rootfs_sha256": digest,
        "duration_s": round(time.monotonic() - start, 3),
    }
