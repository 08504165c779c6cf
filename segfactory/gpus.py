"""The host's NVIDIA GPUs, and what a sandbox or the gate's scorer may use: only what it was assigned.

Here on the ground floor because both the sandboxes and the gate (which imports no ``sandbox``
code) bind GPUs; it reads the driver's files and imports nothing heavy.

A GPU is named by its device minor (``/dev/nvidia<minor>``, the index ``nvidia-smi`` shows on
most hosts); the driver's ``/proc/driver/nvidia/gpus/*/information`` maps it to the GPU's UUID
and model. Inside, ``CUDA_VISIBLE_DEVICES`` lists the UUIDs, so CUDA's own numbering (which need
not follow the minors) cannot select a GPU that was not assigned.

- docker: one device request (driver ``nvidia``, the UUIDs, capability ``gpu``); the NVIDIA
  container toolkit binds those GPUs' nodes and the driver's libraries, nothing more.
- bwrap: the driver's control nodes (``nvidiactl``, ``nvidia-uvm``, ``nvidia-uvm-tools`` where
  present) and ``/dev/nvidia<minor>`` of each assigned GPU, with ``--dev-bind``; the driver's
  user-space libraries live under ``/usr``, which every sandbox already sees read-only.

Without an assignment nothing is bound and nothing is set: bwrap's fresh ``/dev`` has no NVIDIA
node and docker passes no device, so CUDA finds no GPU. Asking for a GPU this machine does not
have is a ``PolicyError`` before anything starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from segfactory.errors import PolicyError

DRIVER_INFO = Path("/proc/driver/nvidia/gpus")  # one folder per GPU (its PCI address), with `information`
DEV = Path("/dev")
CONTROL_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")  # bound when present; the policy's default


@dataclass(frozen=True)
class Gpu:
    """One NVIDIA GPU of this host, as its driver describes it."""

    minor: int  # /dev/nvidia<minor>
    uuid: str  # GPU-xxxxxxxx-...
    model: str
    bus: str  # PCI address


def _fields(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


def host_gpus(info_root: Path = DRIVER_INFO) -> list[Gpu]:
    """The host's NVIDIA GPUs by minor; [] where no NVIDIA driver is loaded."""
    gpus = []
    if not info_root.is_dir():
        return []
    for folder in sorted(info_root.iterdir()):
        try:
            fields = _fields((folder / "information").read_text())
            gpus.append(
                Gpu(
                    minor=int(fields["Device Minor"]),
                    uuid=fields["GPU UUID"],
                    model=fields.get("Model", "?"),
                    bus=folder.name,
                )
            )
        except (OSError, KeyError, ValueError):
            continue  # a GPU the driver does not describe fully is not one we can assign
    return sorted(gpus, key=lambda g: g.minor)


class GpuRecord(TypedDict):
    """One bound GPU as plain data (``GpuPlan.record``)."""

    minor: int
    uuid: str
    model: str


@dataclass(frozen=True)
class GpuPlan:
    """What a sandbox gets for its assigned GPUs (empty: none)."""

    gpus: tuple[Gpu, ...] = ()
    dev: Path = DEV
    control_nodes: tuple[str, ...] = CONTROL_NODES  # bound when present, shared by every GPU

    @property
    def minors(self) -> list[int]:
        return [g.minor for g in self.gpus]

    def env(self) -> dict[str, str]:
        """The environment inside: the assigned UUIDs, in PCI order; nothing without GPUs."""
        if not self.gpus:
            return {}
        return {
            "CUDA_VISIBLE_DEVICES": ",".join(g.uuid for g in self.gpus),
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        }

    def nodes(self) -> list[Path]:
        """The device nodes bwrap binds: the present control nodes, then each assigned GPU's."""
        if not self.gpus:
            return []
        control = [self.dev / name for name in self.control_nodes if (self.dev / name).exists()]
        return [*control, *(self.dev / f"nvidia{g.minor}" for g in self.gpus)]

    def bwrap_args(self) -> list[str]:
        args: list[str] = []
        for node in self.nodes():
            args += ["--dev-bind", str(node), str(node)]
        return args

    def docker_device_requests(self) -> list[Any]:
        """docker-py device requests for the assigned GPUs ([] without)."""
        if not self.gpus:
            return []
        from docker.types import DeviceRequest

        return [
            DeviceRequest(driver="nvidia", device_ids=[g.uuid for g in self.gpus], capabilities=[["gpu"]])
        ]

    def record(self) -> list[GpuRecord]:
        """What was bound, as plain data (minor, UUID, model per GPU)."""
        return [{"minor": g.minor, "uuid": g.uuid, "model": g.model} for g in self.gpus]


def plan_gpus(
    assigned: list[int],
    available: list[Gpu] | None = None,
    dev: Path = DEV,
    control_nodes: tuple[str, ...] = CONTROL_NODES,
) -> GpuPlan:
    """The plan for ``assigned`` minors; PolicyError for a GPU this host does not have or one
    named twice, naming what it has."""
    if not assigned:
        return GpuPlan(dev=dev, control_nodes=control_nodes)
    have = host_gpus() if available is None else available
    by_minor = {g.minor: g for g in have}
    if len(set(assigned)) != len(assigned):
        raise PolicyError(f"GPU assignment {assigned} names a GPU twice")
    missing = [m for m in assigned if m not in by_minor]
    if missing:
        here = ", ".join(f"{g.minor} ({g.model})" for g in have) or "none: this machine has no NVIDIA GPU"
        raise PolicyError(
            f"GPU {missing[0]} was assigned to the sandbox but is not on this machine; GPUs here: {here}"
        )
    for minor in assigned:
        node = dev / f"nvidia{minor}"
        if not node.exists():
            raise PolicyError(f"GPU {minor} has no device node {node}; is the NVIDIA driver loaded?")
    return GpuPlan(gpus=tuple(by_minor[m] for m in assigned), dev=dev, control_nodes=control_nodes)
