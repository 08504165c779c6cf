"""A stand-in for real data: a shifted-domain synthetic set, clearly labelled as NOT real.

The stand-in changes the physics against the default generator: thicker, more attenuating
parts with stronger beam hardening (another part family; Fashion-MNIST silhouettes when an
IDX file is given), a wider PSF and more read noise (another blur and noise model), and a
lower dose range. It is written in the import layout with ``stand_in.json``, so
``data import --real`` records ``stand_in: true`` in both parts' manifests.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from synthetic import generate
from synthetic.exchange import STAND_IN_FILE, export_png
from synthetic.params import GenParams, ParamValues, make_params

STAND_IN_NOTE = (
    "NOT REAL DATA: a synthetic stand-in drawn with shifted physics (part family, noise, "
    "blur, dose) for tests and the demo; replace it with your own labelled images"
)
STAND_IN_OVERRIDES: ParamValues = {
    "thickness_min": 12.0,
    "thickness_max": 36.0,  # thicker castings
    "mu": 0.06,
    "beam_hardening": 0.03,  # another alloy, harder beam
    "blur_min": 1.0,
    "blur_max": 2.0,  # wider detector PSF
    "read_noise": 8.0,  # noisier detector
    "dose_min": 150.0,
    "dose_max": 900.0,  # lower dose range
    "backgrounds": ("vignette", "texture"),
    "contrast_min": 0.04,
    "contrast_max": 0.30,
}


def stand_in_params(idx_path: Path | None = None) -> GenParams:
    """The stand-in's generator parameters (Fashion-MNIST parts when ``idx_path`` is given)."""
    values = dict(STAND_IN_OVERRIDES)
    if idx_path is not None:
        values.update(part_source="fashion-mnist", idx_path=str(idx_path))
    return make_params(**values)


class StandIn(BaseModel):
    """What ``stand-in`` wrote (``--json`` prints it as it is)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    out: str
    count: int
    size: int
    seed: int
    stand_in: bool = True
    n_defects: int
    note: str


def write_stand_in(out: Path, n: int, size: int, seed: int, idx_path: Path | None = None) -> StandIn:
    """Draw the stand-in and write it in the import layout (images/, masks/, stand_in.json)."""
    import tempfile

    params = stand_in_params(idx_path)
    drawn = generate(n, size, seed, params, workers=1)
    with tempfile.TemporaryDirectory(prefix="stand-in-") as tmp:
        split = drawn.write(Path(tmp) / "split")
        export_png(split, out)
    note = {"stand_in": True, "note": STAND_IN_NOTE, "seed": seed, "params": params.model_dump(mode="json")}
    (out / STAND_IN_FILE).write_text(json.dumps(note, indent=2, sort_keys=True) + "\n")
    return StandIn(
        out=str(out), count=n, size=size, seed=seed, n_defects=len(drawn.defects), note=STAND_IN_NOTE
    )
