"""Docker-only behaviour: orphaned containers, the image."""

from __future__ import annotations

import subprocess

import pytest

from sandbox import SandboxBackend
from sandbox._docker import LABEL, PID_LABEL, DockerBackend


def _orphan(backend: SandboxBackend) -> str:
    """A sandbox container whose owner, a process of this PID namespace, has died."""
    from sandbox._docker import _pid_namespace

    assert isinstance(backend, DockerBackend)
    backend.ensure_image()
    dead = subprocess.Popen(["true"])
    dead.wait()
    return str(
        backend.api().create_container(
            backend.policy.image,
            command=["sleep", "100"],
            labels={LABEL: "1", PID_LABEL: f"{_pid_namespace()}:{dead.pid}"},
        )["Id"]
    )


@pytest.mark.docker
def test_containers_of_a_dead_host_process_are_removed(docker_backend: SandboxBackend) -> None:
    assert isinstance(docker_backend, DockerBackend)
    orphan = _orphan(docker_backend)
    assert orphan in docker_backend.remove_orphans()
    assert not docker_backend.api().containers(all=True, filters={"id": orphan})


@pytest.mark.docker
def test_image_holds_no_secrets_only_mount_points(docker_backend: SandboxBackend) -> None:
    import io
    import tarfile

    from sandbox._image import rootfs_tar

    with tarfile.open(fileobj=io.BytesIO(rootfs_tar(docker_backend.policy))) as tar:
        files = {m.name for m in tar.getmembers() if m.isfile()}
    assert files == {"etc/passwd", "etc/group", "etc/nsswitch.conf", "etc/hosts"}
    image = docker_backend.api().inspect_image(docker_backend.policy.image)  # type: ignore[attr-defined]
    assert image["Config"]["User"] == f"{docker_backend.policy.uid}:{docker_backend.policy.gid}"


@pytest.mark.docker
def test_an_orphan_another_run_removed_first_is_not_an_error(
    docker_backend: SandboxBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runs on one host both clean up orphans before their sandboxes start: the one that
    comes second finds the container gone, and its ticket must not fail for that."""
    assert isinstance(docker_backend, DockerBackend)
    orphan = _orphan(docker_backend)
    api = docker_backend.api()
    listed = api.containers(all=True, filters={"label": LABEL})  # what this run saw
    api.remove_container(orphan, force=True)  # ... before the other run removed it
    monkeypatch.setattr(api, "containers", lambda **_: listed)
    assert orphan not in docker_backend.remove_orphans()


def test_a_container_of_another_pid_namespace_is_not_judged_by_this_one() -> None:
    """A segfactory in a compose worker container and one on the host share the engine: each
    sees only its own namespace's pids, so only its own containers may be found orphaned."""
    from sandbox._docker import _pid_namespace, orphaned, owner_label

    dead = subprocess.Popen(["true"])
    dead.wait()
    here = _pid_namespace()
    assert owner_label() == f"{here}:{__import__('os').getpid()}" and not orphaned(owner_label())
    assert orphaned(f"{here}:{dead.pid}")  # ours, and its process is gone
    assert not orphaned(f"{here + 1}:{dead.pid}")  # another namespace's: not ours to judge
    assert orphaned(str(dead.pid)) and not orphaned("0") and not orphaned("junk")  # a bare pid: ours
