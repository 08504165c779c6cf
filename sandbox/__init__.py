"""Sandboxes for agent code: docker and bwrap backends under one policy, image build and verify.

Public API (see docs/sandbox.md)::

    from sandbox import SandboxSpec, get_backend
    result = get_backend("bwrap").run(SandboxSpec(command=["python", "-c", "print(1)"], workspace=ws))

Trust rules: the sandbox never contains the repo root, a home, the
vault or the docker socket; limits fail loudly; the policy is verified from inside a real sandbox.
"""

from sandbox import _bwrap, _docker  # noqa: F401  (register the backends)
from sandbox._base import SandboxBackend, get_backend, known_backends, register_backend
from sandbox._cgroup import delegate_v1
from sandbox._docker import DockerBackend, engine_address
from sandbox._image import build_image
from sandbox._policy import Limits, SandboxPolicy, load_policy
from sandbox._records import Output, SandboxEvent, SandboxResult, SandboxSpec, VerifyCheck, VerifyReport
from sandbox._session import live_workspace

__all__ = [
    "DockerBackend",
    "Limits",
    "Output",
    "SandboxBackend",
    "SandboxEvent",
    "SandboxPolicy",
    "SandboxResult",
    "SandboxSpec",
    "VerifyCheck",
    "VerifyReport",
    "build_image",
    "delegate_v1",
    "engine_address",
    "get_backend",
    "known_backends",
    "live_workspace",
    "load_policy",
    "register_backend",
]
