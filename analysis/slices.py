"""Slice analysis: where a model fails, with counts, intervals and confirmation.

A *unit* is a defect (outcome: missed or not) or an image (outcome: 1 - dice). A *slice* is a
bin of one metadata attribute, or the crossing of two. Scanning hundreds of slices is itself a
selection effect, so a slice becomes a finding only if

1. it has at least ``MIN_SUPPORT`` units on the discovery half of dev,
2. it is worse than its complement there by at least ``MIN_EFFECT``, significant after
   Benjamini–Hochberg at ``FDR_Q`` across every tested slice, and
3. it reproduces on the other half (or on a freshly generated set): at least
   ``MIN_CONFIRM_SUPPORT`` units, an effect of at least ``MIN_EFFECT`` again, and a one-sided
   p-value significant after Benjamini–Hochberg at ``CONFIRM_ALPHA`` across the discovered slices.

A slice that looks bad on one half only is listed in the table as ``discovered`` but never
``confirmed``, and reports and recommendations use confirmed slices only.

Outcomes may also be paired differences against a reference model (candidate minus reference,
per unit), which is how planted-cause runs define a finding.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import combinations

import numpy as np
from pydantic import BaseModel, ConfigDict

from segfactory.stats import benjamini_hochberg, bootstrap_mean_ci, noise_edge, wilson_interval

MIN_SUPPORT = 30  # units on the discovery half; smaller slices are not tested
MIN_CONFIRM_SUPPORT = 15  # units on the confirmation half
MIN_EFFECT = 0.10  # slice minus complement (failure rate or 1 - dice) to count as a finding
SLICE_NOISE_LEVEL = (
    0.99  # one-sided prediction level of a slice's seed-noise band (segfactory.stats.noise_edge)
)
FDR_Q = 0.10  # Benjamini–Hochberg false discovery rate across slices
CONFIRM_ALPHA = 0.05  # one-sided level of the confirmation test
N_QUANTILE_BINS = 4  # numeric attributes are cut at their quartiles
MAX_CATEGORIES = 12  # a categorical attribute with more values is not sliced
N_BOOT_SLICE = 500  # bootstrap resamples for a slice interval of a non-binary outcome
TABLE_ROWS = 40  # rows (per unit kind) of the slice table kept in a report, with intervals

Predicate = Callable[["Units"], np.ndarray]


@dataclass
class Units:
    """Units of one kind with their attributes, outcome (higher = worse) and image index."""

    kind: str  # "defect" or "image"
    columns: dict[str, np.ndarray]  # attribute -> (n,) object array (float, str or None)
    outcome: np.ndarray  # (n,) float
    image: np.ndarray  # (n,) int: which image each unit lies in (halves split by image)
    _numeric: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    def __len__(self) -> int:
        return int(self.outcome.shape[0])

    def numeric(self, attr: str) -> np.ndarray:
        """The column as float64, NaN where a value is missing or not a number (cached)."""
        if attr not in self._numeric:
            self._numeric[attr] = np.array(
                [float(v) if _is_number(v) else np.nan for v in self.columns[attr]]
            )
        return self._numeric[attr]


class SliceRow(BaseModel):
    """One slice: its score on all of dev, and what discovery and confirmation said."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    unit: str
    attributes: list[str]
    n: int
    score: float  # mean outcome in the slice (all of dev)
    low: float
    high: float
    complement: float
    effect: float  # score - complement
    discovery_n: int
    discovery_effect: float
    p_value: float
    q_value: float
    discovered: bool
    confirm_n: int = 0
    confirm_effect: float = 0.0
    confirm_p: float = 1.0
    noise_effect: float = (
        0.0  # edge of the slice's seed-noise band: its effect between unplanted seeds (0: not measured)
    )
    confirmed: bool = False
    # the slice's share of the training units over its share of dev's (None: not measured); near 0
    # the model never saw such units, which drawn data can supply and more capacity cannot
    train_coverage: float | None = None


@dataclass
class SliceReport:
    rows: list[SliceRow]  # the TABLE_ROWS most notable tested slices, plus any further confirmed ones
    n_tested: int
    n_below_support: int
    notes: list[str] = field(default_factory=list)

    @property
    def findings(self) -> list[SliceRow]:
        """Confirmed slices, strongest first."""
        return [r for r in self.rows if r.confirmed]


@dataclass(frozen=True)
class SliceDef:
    name: str
    attributes: tuple[str, ...]
    predicate: Predicate
    parts: tuple[str, ...] = ()  # names of the one-way slices a two-way slice crosses


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and np.isfinite(value)


def _numeric_bins(attr: str, values: np.ndarray) -> list[SliceDef]:
    nums = np.array([float(v) for v in values if _is_number(v)])
    edges = np.unique(np.quantile(nums, np.linspace(0, 1, N_QUANTILE_BINS + 1)[1:-1]))
    bounds = [-np.inf, *edges.tolist(), np.inf]
    defs = []
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):

        def pred(units: Units, lo: float = lo, hi: float = hi) -> np.ndarray:
            num = units.numeric(attr)
            with np.errstate(invalid="ignore"):
                return (num >= lo) & (num < hi)

        label = (
            f"{attr}<{hi:.3g}"
            if lo == -np.inf
            else (f"{attr}>={lo:.3g}" if hi == np.inf else f"{attr}∈[{lo:.3g},{hi:.3g})")
        )
        defs.append(SliceDef(label, (attr,), pred))
    return defs


def _category_bins(attr: str, values: np.ndarray) -> list[SliceDef]:
    cats = sorted({str(v) for v in values if v is not None})
    defs = []
    for cat in cats:

        def pred(units: Units, cat: str = cat) -> np.ndarray:
            return np.array([v is not None and str(v) == cat for v in units.columns[attr]], dtype=bool)

        defs.append(SliceDef(f"{attr}={cat}", (attr,), pred))
    return defs


def one_way_slices(units: Units, notes: list[str]) -> list[SliceDef]:
    """Bins of every usable attribute; unusable ones are named in ``notes``."""
    defs: list[SliceDef] = []
    for attr, values in units.columns.items():
        present = [v for v in values if _present(v)]
        if not present:
            notes.append(f"{units.kind} attribute '{attr}' is missing from the metadata; no {attr} slices")
            continue
        if all(_is_number(v) for v in present):
            if len({float(v) for v in present}) > 1:
                defs.extend(_numeric_bins(attr, values))
        elif len({str(v) for v in present}) <= MAX_CATEGORIES:
            defs.extend(_category_bins(attr, values))
        else:
            notes.append(f"{units.kind} attribute '{attr}' has more than {MAX_CATEGORIES} values; not sliced")
    return defs


def two_way_slices(defs: list[SliceDef]) -> list[SliceDef]:
    """Crossings of bins of two different attributes (evaluated through ``slice_masks``)."""
    out = []
    for a, b in combinations(defs, 2):
        if a.attributes == b.attributes:
            continue

        def pred(units: Units, a: SliceDef = a, b: SliceDef = b) -> np.ndarray:
            return a.predicate(units) & b.predicate(units)

        out.append(SliceDef(f"{a.name} & {b.name}", a.attributes + b.attributes, pred, (a.name, b.name)))
    return out


def slice_masks(defs: list[SliceDef], units: Units) -> dict[str, np.ndarray]:
    """Every slice's membership mask; two-way masks reuse their one-way parts."""
    masks: dict[str, np.ndarray] = {}
    for d in defs:
        if d.parts and all(p in masks for p in d.parts):
            masks[d.name] = masks[d.parts[0]] & masks[d.parts[1]]
        else:
            masks[d.name] = d.predicate(units)
    return masks


def one_sided_p(inside: np.ndarray, outside: np.ndarray) -> float:
    """Welch's one-sided p-value that ``inside`` has the larger mean (1.0 when undecidable)."""
    if inside.size < 2 or outside.size < 2:
        return 1.0
    diff = float(inside.mean() - outside.mean())
    se2 = inside.var(ddof=1) / inside.size + outside.var(ddof=1) / outside.size
    if se2 <= 0:
        return 0.0 if diff > 0 else 1.0
    return 0.5 * math.erfc(diff / math.sqrt(2.0 * se2))  # normal upper tail of diff / se


def _effect(outcome: np.ndarray, mask: np.ndarray) -> tuple[int, float, float]:
    n = int(mask.sum())
    if n == 0 or n == mask.size:
        return n, 0.0, 1.0
    inside, outside = outcome[mask], outcome[~mask]
    return n, float(inside.mean() - outside.mean()), one_sided_p(inside, outside)


def _interval(values: np.ndarray, seed: int) -> tuple[float, float, float]:
    if np.isin(values, (0.0, 1.0)).all():
        iv = wilson_interval(int(values.sum()), int(values.size))
    else:
        iv = bootstrap_mean_ci(values, n_boot=N_BOOT_SLICE, seed=seed)
    return iv.estimate, iv.low, iv.high


def halves(units: Units, seed: int) -> np.ndarray:
    """True for units on the discovery half: a seeded half of the images (not of the units)."""
    images = np.unique(units.image)
    rng = np.random.default_rng(seed)
    chosen = rng.permutation(images)[: (images.size + 1) // 2]
    return np.isin(units.image, chosen)


def find_slices(
    units: Units,
    *,
    seed: int = 0,
    confirm: Units | None = None,
    noise: np.ndarray | list[np.ndarray] | None = None,
    train: Units | None = None,
) -> SliceReport:
    """Score every slice; discover on one half of ``units`` and confirm on the other
    (or on ``confirm``, a fresh set with the same attributes, when given).

    ``noise`` (aligned with ``units``) is the same outcome between two unplanted models that
    differ only in training seed; a slice is then confirmed only if its effect beats the
    seed-to-seed effect on the same slice by ``MIN_EFFECT``. Given several such outcomes (one per
    extra unplanted seed), the band of a slice is the largest effect any of them shows there.

    ``train`` (units of the same kind over the training data; outcomes unused) gives each kept
    row its ``train_coverage``.
    """
    notes: list[str] = []
    if len(units) == 0:
        return SliceReport([], 0, 0, [f"no {units.kind} units; no slices"])
    base = one_way_slices(units, notes)
    defs = base + two_way_slices(base)
    if confirm is None:
        disc = halves(units, seed)
        conf_units, conf_mask = units, ~disc
    else:
        disc = np.ones(len(units), dtype=bool)
        conf_units, conf_mask = confirm, np.ones(len(confirm), dtype=bool)
    masks = slice_masks(defs, units)
    conf_masks = masks if conf_units is units else slice_masks(defs, conf_units)
    tested = []
    below = 0
    for d in defs:
        mask = masks[d.name]
        n_disc, eff_disc, p_disc = _effect(units.outcome[disc], mask[disc])
        if n_disc < MIN_SUPPORT or int(mask.sum()) == len(units):
            below += 1
            continue
        tested.append((d, mask, n_disc, eff_disc, p_disc))
    if not tested:
        notes.append(f"no {units.kind} slice reached the minimum support of {MIN_SUPPORT}")
        return SliceReport([], 0, below, notes)
    rejected, adjusted = benjamini_hochberg([t[4] for t in tested], q=FDR_Q)
    rows = [
        _row(units, t, bool(r), float(q), conf_units.outcome[conf_mask], conf_masks[t[0].name][conf_mask])
        for t, r, q in zip(tested, rejected, adjusted, strict=True)
    ]
    bands = [] if noise is None else [noise] if isinstance(noise, np.ndarray) else noise
    if bands:
        rows = [
            r.model_copy(
                update={
                    "noise_effect": noise_edge(
                        [_effect(b, masks[r.name])[1] for b in bands], upper=True, level=SLICE_NOISE_LEVEL
                    )
                }
            )
            for r in rows
        ]
    rows = _confirm(rows)
    rows.sort(key=lambda r: (not r.confirmed, not r.discovered, -r.effect, r.name))
    kept = [_with_interval(r, units.outcome[masks[r.name]], seed) for r in rows[:TABLE_ROWS]]
    kept += [r for r in rows[TABLE_ROWS:] if r.confirmed]  # a finding is never cut from the table
    if train is not None and len(train):
        by_name = {d.name: d for d in defs}
        kept = [
            r.model_copy(update={"train_coverage": _coverage(r, by_name[r.name], units, train)}) for r in kept
        ]
    return SliceReport(kept, len(tested), below, notes)


def _coverage(row: SliceRow, slice_def: SliceDef, units: Units, train: Units) -> float | None:
    """The slice's share of ``train`` over its share of ``units`` (dev), the bins being dev's;
    None when the training metadata lacks one of the slice's attributes (not measured, not 0)."""
    for attr in slice_def.attributes:
        values = train.columns.get(attr)
        if values is None or not any(_present(v) for v in values):
            return None
    in_train = float(np.mean(slice_def.predicate(train)))
    return round(in_train / (row.n / len(units)), 4)


def _present(value: object) -> bool:
    return value is not None and not (isinstance(value, float) and np.isnan(value))


def _with_interval(row: SliceRow, values: np.ndarray, seed: int) -> SliceRow:
    _, low, high = _interval(values, seed)
    return row.model_copy(update={"low": low, "high": high})


def _confirm(rows: list[SliceRow]) -> list[SliceRow]:
    """Mark discovered slices confirmed: enough support, effect >= MIN_EFFECT, and BH at
    CONFIRM_ALPHA across every discovered slice's confirmation p-value; the effect must also
    beat the seed-to-seed effect (when measured) by MIN_EFFECT."""
    idx = [k for k, r in enumerate(rows) if r.discovered]
    if not idx:
        return rows
    passed, _ = benjamini_hochberg([rows[k].confirm_p for k in idx], q=CONFIRM_ALPHA)
    out = list(rows)
    for k, ok in zip(idx, passed, strict=True):
        r = rows[k]
        confirmed = (
            bool(ok)
            and r.confirm_n >= MIN_CONFIRM_SUPPORT
            and r.confirm_effect >= MIN_EFFECT
            and r.effect - max(r.noise_effect, 0.0) >= MIN_EFFECT
        )
        out[k] = r.model_copy(update={"confirmed": confirmed})
    return out


def _row(
    units: Units,
    tested: tuple[SliceDef, np.ndarray, int, float, float],
    rejected: bool,
    q: float,
    conf_outcome: np.ndarray,
    conf_in_slice: np.ndarray,
) -> SliceRow:
    """A slice's row; its interval is filled in by ``_with_interval`` for the rows a report keeps."""
    d, mask, n_disc, eff_disc, p_disc = tested
    score = float(units.outcome[mask].mean())
    low = high = score
    complement = float(units.outcome[~mask].mean())
    discovered = rejected and eff_disc >= MIN_EFFECT
    conf_n, conf_eff, conf_p = 0, 0.0, 1.0
    if discovered:
        conf_n, conf_eff, conf_p = _effect(conf_outcome, conf_in_slice)
    return SliceRow(
        name=d.name,
        unit=units.kind,
        attributes=list(d.attributes),
        n=int(mask.sum()),
        score=score,
        low=low,
        high=high,
        complement=complement,
        effect=score - complement,
        discovery_n=n_disc,
        discovery_effect=eff_disc,
        p_value=p_disc,
        q_value=q,
        discovered=discovered,
        confirm_n=conf_n,
        confirm_effect=conf_eff,
        confirm_p=conf_p,
    )
