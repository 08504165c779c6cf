"""The realism report: per-slice statistics, MMD and the C2ST, side-by-side plots.

The report holds aggregate numbers only (counts, medians, histograms, spectra, test
statistics); no image, crop, image hash or file name of the real set is written, logged or
returned. Whatever the numbers say, they are not the test that counts: that is whether a
real held-out slice improves (``segfactory topup``), and the report says so.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from analysis.realism._stats import EDGE_PX, SetStats, set_stats
from analysis.realism._tests import C2st, Mmd, c2st, mmd_test
from segfactory.errors import DataError, UsageError
from segfactory.files import write_atomic
from segfactory.records import Result
from synthetic.splits import read_split
from vision.metrics import SIZE_BIN_NAMES

NOT_THE_TEST = (
    "These realism numbers are descriptive only. They are not the test that counts: synthetic "
    "data is judged by whether a real held-out slice improves against matched controls "
    "(segfactory topup). A set can look real and not help, or look fake and help."
)
REPORT_FILE = "realism.json"
PLOT_FILE = "realism.png"


class Ks(Result):
    statistic: float
    p_value: float


class BySet(Result):
    synthetic: float | None  # None: the set has no void in this slice
    real: float | None


class EdgeProfile(Result):
    """Intensity relative to the local background across the void edge, per distance in pixels."""

    distance_px: list[int]
    synthetic: list[float | None]
    real: list[float | None]
    mean_abs_gap: float | None


class SliceStats(Result):
    """One void size slice in both sets."""

    slice: str
    n_synthetic: int
    n_real: int
    share_synthetic: float | None
    share_real: float | None
    median_area: BySet
    median_contrast: BySet
    contrast_ks: Ks | None  # None below two voids on a side
    edge_profile: EdgeProfile


class Voids(Result):
    n_synthetic: int
    n_real: int
    area_ks: Ks | None
    contrast_ks: Ks | None


class NoiseSpectrum(Result):
    synthetic: list[float]
    real: list[float]
    mean_abs_log_ratio: float


class RealismReport(Result):
    """What ``segfactory realism`` reports: aggregates only. ``realism_report`` adds the last three
    keys (whether the real set is a stand-in, the plot and the report file)."""

    note: str
    n_synthetic: int
    n_real: int
    voids: Voids
    slices: list[SliceStats]
    noise_power_spectrum: NoiseSpectrum
    mmd: Mmd
    statistics_seconds: float
    classifier: C2st | None  # None with --no-classifier
    stand_in: bool | None = None
    plot: str | None = None
    report: str | None = None


def load_real(path: Path) -> Any:
    """The host-side real-dev split at ``path`` (or ``path/real-dev``); refuses the holdout part."""
    folder = path / "real-dev" if (path / "real-dev").is_dir() else path
    split = read_split(folder, mmap=True)
    if split.manifest.get("real_part") == "holdout":
        raise UsageError(
            f"{folder} is the holdout part of a real set: it belongs in the vault "
            f"(`gate add-real`); run realism checks on the real-dev part"
        )
    if split.manifest.get("kind") != "real":
        raise DataError(
            f"{folder} is not a real set (manifest kind {split.manifest.get('kind')!r}); "
            f"import it with `data import SRC --out DIR --real`"
        )
    return split


def _median(x: np.ndarray) -> float | None:
    return round(float(np.median(x)), 6) if x.size else None


def _ks(a: np.ndarray, b: np.ndarray) -> Ks | None:
    from scipy.stats import ks_2samp

    if a.size < 2 or b.size < 2:
        return None
    res = ks_2samp(a, b)
    return Ks(statistic=round(float(res.statistic), 6), p_value=float(res.pvalue))


def _profile(row: np.ndarray) -> list[float | None]:
    return [None if np.isnan(v) else round(float(v), 6) for v in row]


def _slice_rows(syn: SetStats, real: SetStats) -> list[SliceStats]:
    rows = []
    for b, name in enumerate(SIZE_BIN_NAMES):
        s, r = syn.void_bin == b, real.void_bin == b
        diff = np.abs(syn.edge_profile[b] - real.edge_profile[b])
        gap = float(diff[~np.isnan(diff)].mean()) if (~np.isnan(diff)).any() else np.nan
        rows.append(
            SliceStats(
                slice=name,
                n_synthetic=int(s.sum()),
                n_real=int(r.sum()),
                share_synthetic=round(float(s.mean()), 6) if s.size else None,
                share_real=round(float(r.mean()), 6) if r.size else None,
                median_area=BySet(synthetic=_median(syn.void_area[s]), real=_median(real.void_area[r])),
                median_contrast=BySet(
                    synthetic=_median(syn.void_contrast[s]), real=_median(real.void_contrast[r])
                ),
                contrast_ks=_ks(syn.void_contrast[s], real.void_contrast[r]),
                edge_profile=EdgeProfile(
                    distance_px=list(range(-EDGE_PX, EDGE_PX + 1)),
                    synthetic=_profile(syn.edge_profile[b]),
                    real=_profile(real.edge_profile[b]),
                    mean_abs_gap=None if np.isnan(gap) else round(float(gap), 6),
                ),
            )
        )
    return rows


def compare(
    syn_images: np.ndarray,
    syn_masks: np.ndarray,
    real_images: np.ndarray,
    real_masks: np.ndarray,
    *,
    seed: int = 0,
    classifier: bool = True,
) -> tuple[RealismReport, SetStats, SetStats]:
    """The report (aggregates only) and both sets' statistics (for the plots)."""
    started = time.perf_counter()
    syn, real = set_stats(syn_images, syn_masks), set_stats(real_images, real_masks)
    nps_gap = float(np.mean(np.abs(np.log(syn.nps + 1e-12) - np.log(real.nps + 1e-12))))
    voids = Voids(
        n_synthetic=int(syn.void_area.size),
        n_real=int(real.void_area.size),
        area_ks=_ks(syn.void_area, real.void_area),
        contrast_ks=_ks(syn.void_contrast, real.void_contrast),
    )
    spectrum = NoiseSpectrum(
        synthetic=[float(v) for v in syn.nps],
        real=[float(v) for v in real.nps],
        mean_abs_log_ratio=round(nps_gap, 6),
    )
    slices, mmd = _slice_rows(syn, real), mmd_test(syn.features, real.features, seed=seed)
    statistics_seconds = round(time.perf_counter() - started, 3)
    report = RealismReport(
        note=NOT_THE_TEST,
        n_synthetic=syn.n_images,
        n_real=real.n_images,
        voids=voids,
        slices=slices,
        noise_power_spectrum=spectrum,
        mmd=mmd,
        statistics_seconds=statistics_seconds,
        classifier=c2st(syn_images, real_images, seed=seed) if classifier else None,
    )
    return report, syn, real


def _pooled_profile(stats: SetStats) -> np.ndarray:
    """The edge profile averaged over size bins that reach each distance (NaN where none does)."""
    seen = ~np.isnan(stats.edge_profile)
    total = np.where(seen, stats.edge_profile, 0.0).sum(axis=0)
    count = seen.sum(axis=0)
    return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def plot(syn: SetStats, real: SetStats, path: Path) -> Path:
    """Side-by-side histograms, spectra and edge profiles as one PNG (aggregates only)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(10, 8))
    grid = np.linspace(0, 1, syn.intensity_hist.size + 1)[:-1]
    for stats, label in ((syn, "synthetic"), (real, "real (aggregate)")):
        axes[0, 0].step(grid, stats.intensity_hist, where="post", label=label)
        axes[0, 1].hist(stats.void_contrast, bins=30, range=(0, 0.5), density=True, alpha=0.5, label=label)
        axes[1, 0].semilogy(np.linspace(0, 1, stats.nps.size), stats.nps, label=label)
        axes[1, 1].plot(range(-EDGE_PX, EDGE_PX + 1), _pooled_profile(stats), label=label)
    titles = (
        "pixel intensity",
        "void contrast",
        "noise power spectrum (1 = Nyquist)",
        "edge profile I/r - 1",
    )
    for ax, title in zip(axes.ravel(), titles, strict=True):
        ax.set_title(title)
        ax.legend()
    fig.suptitle("Realism checks: descriptive only, not the test that counts")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def realism_report(
    synthetic_dir: Path, real_path: Path, out_dir: Path, *, seed: int = 0, classifier: bool = True
) -> RealismReport:
    """Compare a synthetic split with a real-dev split; write realism.json and realism.png."""
    syn_split = read_split(synthetic_dir, mmap=True)
    real_split = load_real(real_path)
    report, syn, real = compare(
        np.asarray(syn_split.images),
        np.asarray(syn_split.masks),
        np.asarray(real_split.images),
        np.asarray(real_split.masks),
        seed=seed,
        classifier=classifier,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    report = report.model_copy(
        update={
            "stand_in": bool(real_split.manifest.get("stand_in", False)),
            "plot": str(plot(syn, real, out_dir / PLOT_FILE)),
            "report": str(out_dir / REPORT_FILE),
        }
    )
    write_atomic(out_dir / REPORT_FILE, json.dumps(report.as_json(), indent=2, sort_keys=True) + "\n")
    return report
