"""Safetensors checkpoints that carry their training config, and the resume state."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, NotRequired, TypedDict

import torch
import yaml
from torch import nn

from segfactory.errors import DataError
from vision.config import TrainConfig, dump_config, parse_config
from vision.models import build_model

FORMAT = "segfactory-vision-1"  # metadata["format"] of every checkpoint this module writes
MODEL_FILE = "model.safetensors"
RESUME_FILE = "resume.pt"  # optimiser, schedule and RNG state (tensors and plain values only)


def _atomic(path: Path, write: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    os.replace(tmp, path)


def save_checkpoint(model: nn.Module, config: TrainConfig, path: Path, epoch: int) -> None:
    """Write weights (float32, CPU, contiguous) with the config as YAML in the metadata."""
    from safetensors.torch import save_file

    state = {
        k: v.detach().float().cpu().contiguous() if v.is_floating_point() else v.detach().cpu().contiguous()
        for k, v in model.state_dict().items()
    }
    meta = {"format": FORMAT, "config": dump_config(config), "epoch": str(epoch)}
    _atomic(path, lambda tmp: save_file(state, str(tmp), metadata=meta))


def read_checkpoint(path: Path) -> tuple[dict[str, torch.Tensor], TrainConfig, int]:
    """(state dict, config, epoch) from a checkpoint written by ``save_checkpoint``."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    if not path.is_file():
        raise DataError(f"checkpoint {path} not found")
    with safe_open(str(path), framework="pt") as handle:
        meta = handle.metadata() or {}
    if meta.get("format") != FORMAT:
        raise DataError(f"{path} is not a segfactory checkpoint (format {meta.get('format')!r})")
    config = parse_config(yaml.safe_load(meta["config"]), f"{path} metadata")
    return load_file(str(path)), config, int(meta["epoch"])


def load_model(path: Path) -> tuple[nn.Module, TrainConfig]:
    """Rebuild the model a checkpoint names and load its weights (eval mode, CPU)."""
    state, config, _ = read_checkpoint(path)
    model = build_model(config.model.name, config.model.decoder_width, stages=config.model.stages)
    model.load_state_dict(state)
    return model.eval(), config


def load_weights(model: nn.Module, path: Path) -> int:
    """Load a checkpoint's weights into ``model`` strictly; returns the checkpoint's epoch.

    Only the weights are taken: the model was built from the caller's own config, never from the
    checkpoint's metadata. A file that is not a segfactory checkpoint, or whose tensors do not
    match the model's names and shapes one to one, raises DataError before anything trains."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as handle:
            meta = handle.metadata() or {}
            state = {key: handle.get_tensor(key) for key in handle.keys()}  # noqa: SIM118 - not a dict
    except (OSError, SafetensorError) as exc:
        raise DataError(f"init_from checkpoint {path} cannot be read as safetensors: {exc}") from None
    if meta.get("format") != FORMAT:
        raise DataError(f"init_from {path} is not a segfactory checkpoint (format {meta.get('format')!r})")
    mismatch = _state_mismatch(model.state_dict(), state)
    if mismatch:
        raise DataError(
            f"init_from checkpoint {path} does not fit this ticket's model ({mismatch}); "
            "continue only from a parent with the same architecture"
        )
    model.load_state_dict(state, strict=True)
    return int(meta.get("epoch", -1))


def _state_mismatch(expected: dict[str, torch.Tensor], got: dict[str, torch.Tensor]) -> str:
    """What differs between two state dicts (names, then shapes); empty when they match."""
    missing, unexpected = sorted(set(expected) - set(got)), sorted(set(got) - set(expected))
    shapes = [
        f"{k}: {tuple(got[k].shape)} for {tuple(expected[k].shape)}"
        for k in sorted(set(expected) & set(got))
        if got[k].shape != expected[k].shape
    ]
    parts = [
        f"{label} {items[:3]}{'...' if len(items) > 3 else ''}"
        for label, items in (("missing", missing), ("unexpected", unexpected), ("shape", shapes))
        if items
    ]
    return "; ".join(parts)


class ResumeState(TypedDict):
    """``resume.pt``: where a run stands after an epoch, to continue it from there."""

    config: str  # the run's config as ``dump_config`` writes it; a resume needs the same
    epoch: int  # the last epoch completed
    model: dict[str, torch.Tensor]  # the model's state dict
    optimizer: dict[str, object]  # the optimiser's and scheduler's state dicts, as torch gives them
    scheduler: dict[str, object]
    epochs_planned: NotRequired[int]  # the run's planned length (a budget-sized run re-sizes it)
    best: NotRequired[BestEpoch | None]  # the epoch kept so far when the run carves a validation split


class BestEpoch(TypedDict):
    """The epoch a carving run keeps so far: the best on its carve (vision.train)."""

    epoch: int
    object_f1: float  # on the carve
    model: dict[str, torch.Tensor]
    dev: dict[str, float]  # that epoch's dev metrics (people's view; nothing is chosen on them)


def save_resume(path: Path, state: ResumeState) -> None:
    _atomic(path, lambda tmp: torch.save(state, tmp))


def load_resume(path: Path) -> ResumeState:
    """Resume state, read with ``weights_only=True`` (no arbitrary unpickling)."""
    loaded: ResumeState = torch.load(path, weights_only=True)
    return loaded
