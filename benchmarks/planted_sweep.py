"""The planted-cause sweep on the vision models: null-run false-finding rate and recovery per kind.

A fixed mix of four null runs can only pass or fail; this measures the rates the CI test's bar
is about (docs/analysis.md, "Second follow-up"). Every model is trained once with
``analysis.planted_vision`` (8 epochs, one thread, ``--workers`` at a time) and its dev and
train probabilities cached under ``--cache`` (``.npz``, written to a temp name and renamed, so an
interrupted sweep resumes); the analysis then runs over the cache:

- null runs: every extra unplanted seed (``--null-seeds``) and two extra placebos per reference,
  each analysed against every reference seed and its three seed-noise twins;
- planted runs: per reference seed, size, masks and capacity with the CI mix's draws (seeds 1-2:
  draw seeds 100-102) or the fresh mix's (3-4: 300-302), plus contrast, background, masks and
  size with draw seeds 500-503.

Full sweep (4 references, 32 null seeds): 96 trainings, about 20 minutes on 2 idle cores, then
about 6 minutes of analysis. ``--quick`` trains 1 epoch, 1 reference and 2 null seeds (a smoke run).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

TWIN_OFFSETS = (100, 300, 400)  # as tests/analysis/test_planted_vision.py
PLACEBO_DRAWS = (1000, 1001)
EXTRA_PLANTED = (("contrast", 500), ("background", 501), ("masks", 502), ("size", 503))


def mix_draw(ref: int) -> int:
    """The first draw seed of the CI mix (reference seeds 1, 2) or the fresh mix (3, 4 and up)."""
    return 100 if ref <= 2 else 300


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, default=Path("/var/tmp/segfactory-planted-sweep"))
    ap.add_argument("--refs", default="1,2,3,4", help="reference seeds, comma-separated")
    ap.add_argument("--null-seeds", type=int, default=32, help="extra unplanted seeds 500, 501, ...")
    ap.add_argument("--epochs", type=int, default=None, help="default: planted_config()'s")
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--quick", action="store_true", help="1 epoch, 1 reference, 2 null seeds")
    args = ap.parse_args(argv)

    import numpy as np

    from analysis.planted import (
        NULL_KINDS,
        CauseKind,
        Planted,
        PlantedCause,
        analyse_planted,
        draw_cause,
        fit_all,
        plant,
    )
    from analysis.planted_vision import VISION_RANGES, VisionTrainer, planted_config, planted_data
    from analysis.report import Evaluated
    from segfactory.stats import wilson_interval

    refs = [1] if args.quick else [int(r) for r in args.refs.split(",")]
    null_seeds = list(range(500, 500 + (2 if args.quick else args.null_seeds)))
    config = planted_config()
    epochs = 1 if args.quick else (args.epochs or config.epochs)
    config = config.model_copy(update={"epochs": epochs})
    cache = args.cache / f"e{epochs}"
    cache.mkdir(parents=True, exist_ok=True)
    train, dev = planted_data()
    trainer = VisionTrainer(config, images_per_epoch=len(train.images))

    def unplanted_cause() -> PlantedCause:
        return PlantedCause(kind="none", magnitude=0.0)

    # every model of the sweep: cache name -> (what it trains on, its seed)
    models: dict[str, tuple[Planted, int]] = {}
    whole = Planted(train.images, train.masks, 1.0, unplanted_cause(), train.image_meta, train.defects)
    for seed in sorted({r + o for r in refs for o in (0, *TWIN_OFFSETS)} | set(null_seeds)):
        models[f"unplanted_{seed}"] = (whole, seed)
    runs: list[tuple[int, str, Any]] = []  # (reference seed, cache name, planted)
    for r in refs:
        draws: list[tuple[CauseKind, int]] = [
            ("size", mix_draw(r)),
            ("masks", mix_draw(r) + 1),
            ("capacity", mix_draw(r) + 2),
        ]
        draws += list(EXTRA_PLANTED) + [("placebo", d) for d in PLACEBO_DRAWS]
        for kind, draw in draws:
            p = plant(
                draw_cause(np.random.default_rng(draw), kind, VISION_RANGES), train, np.random.default_rng(r)
            )
            name = f"{kind}_{p.cause.magnitude}_seed{r}"
            models[name] = (p, r)
            runs.append((r, name, p))

    todo = [n for n in models if not (cache / f"{n}.npz").exists()]
    print(
        f"{len(models)} models, {len(todo)} to train ({epochs} epochs, {args.workers} at a time) -> {cache}"
    )
    for start in range(0, len(todo), max(1, args.workers) * 4):  # chunks: progress, and a resumable cache
        chunk = todo[start : start + max(1, args.workers) * 4]
        jobs = [
            (
                models[n][0].images,
                models[n][0].masks,
                models[n][0].capacity,
                models[n][1],
                (dev.images, train.images),
            )
            for n in chunk
        ]
        for name, (on_dev, on_train) in zip(chunk, fit_all(trainer, jobs, args.workers), strict=True):
            tmp = cache / f"{name}.tmp.npz"
            np.savez(tmp, dev=on_dev, train=on_train)
            os.replace(tmp, cache / f"{name}.npz")
        print(f"  trained {min(start + len(chunk), len(todo))}/{len(todo)}", flush=True)

    loaded: dict[str, tuple[Evaluated, np.ndarray]] = {}

    def model(name: str) -> tuple[Evaluated, np.ndarray]:
        if name not in loaded:
            z = np.load(cache / f"{name}.npz")
            loaded[name] = (Evaluated(dev, z["dev"]), z["train"])
        return loaded[name]

    index = {str(m.get("id")): k for k, m in enumerate(train.image_meta)}

    def on_planted(p: Planted, probs: np.ndarray) -> np.ndarray:  # train predictions on the planted subset
        return probs[np.array([index[str(m.get("id"))] for m in p.image_meta], dtype=int)]

    def analysed(r: int, p: Planted, name: str) -> tuple[Any, Any]:
        ref_dev, ref_train = model(f"unplanted_{r}")
        twins = [model(f"unplanted_{r + o}") for o in TWIN_OFFSETS]
        twins_ev = [(d, Evaluated(train, t)) for d, t in twins]
        cand_dev, cand_train = model(name)
        return analyse_planted(
            p,
            cand_dev.prob,
            on_planted(p, cand_train),
            dev,
            ref_dev,
            seed=r,
            reference_train=Evaluated(train, ref_train),
            seed_reference=twins_ev[0][0],
            seed_reference_train=twins_ev[0][1],
            more_seed_references=twins_ev[1:],
        )

    null_found: dict[str, int] = {}
    n_null = n_false = 0
    recovered: dict[str, list[bool]] = {}
    for r in refs:
        candidates = [(f"unplanted_{s}", whole) for s in null_seeds]
        candidates += [(name, p) for rr, name, p in runs if rr == r and p.cause.kind in NULL_KINDS]
        for name, p in candidates:
            result, report = analysed(r, p, name)
            n_null += 1
            if not result.recovered:
                n_false += 1
                key = report.recommendations[0].id.rsplit("-", 1)[0]
                null_found[key] = null_found.get(key, 0) + 1
        for rr, name, p in runs:
            if rr == r and p.cause.kind not in NULL_KINDS:
                result, _ = analysed(r, p, name)
                recovered.setdefault(p.cause.kind, []).append(result.recovered)
                print(
                    f"  seed {r} {name}: top recommendation {result.named}, "
                    f"top finding {result.top_finding}: {'ok' if result.recovered else 'missed'}",
                    flush=True,
                )

    iv = wilson_interval(n_false, n_null)
    print(
        f"null runs with a finding: {n_false}/{n_null} = {iv.estimate:.3f} [{iv.low:.3f}, {iv.high:.3f}] "
        f"(Wilson 95%; the null seeds meet every reference, so runs are correlated) {null_found}"
    )
    hits = [h for v in recovered.values() for h in v]
    iv = wilson_interval(sum(hits), len(hits))
    print(
        f"planted runs recovered: {sum(hits)}/{len(hits)} = {iv.estimate:.2f} [{iv.low:.2f}, {iv.high:.2f}]; "
        + ", ".join(f"{k} {sum(v)}/{len(v)}" for k, v in recovered.items())
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
