"""What one training run reports: ``TrainResult``, written as ``result.json`` beside the model.

Every engine (the PyTorch loop, the classical detector, nnU-Net) ends in one of these, so it sits
apart from any of them.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

PARITY_IMAGES = 32  # dev images used by the reload and ONNX parity checks
RESULT_FILE = "result.json"
ONNX_FILE = "model.onnx"


class TrainResult(BaseModel):
    """What a run reports in result.json (the host recomputes evidence; this is the run's own view)."""

    model_config = ConfigDict(extra="forbid")

    usable: bool
    stopped_reason: str | None = None  # set when the run ended early (NaN loss)
    model: str
    epochs_completed: int
    device: str
    reload_ok: bool = False
    parity: dict[str, float | bool] = {}
    dev: dict[str, float] = {}
    timings: dict[str, float] = {}
    files: dict[str, str] = {}
    plan: dict[str, object] = {}  # the nnunet engine: what nnU-Net planned and how long it trained


def write_result(out: Path, result: TrainResult) -> None:
    (out / RESULT_FILE).write_text(result.model_dump_json(indent=2) + "\n")


__all__ = ["ONNX_FILE", "PARITY_IMAGES", "RESULT_FILE", "TrainResult", "write_result"]
