"""The comparison's summary (plain words on who won) and its best-so-far plot (people only)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from controls.rates import Yield

TIE_TOLERANCE = 0.005  # object F1 points: mean sealed scores closer than this are a tie


def _sealed_f1(run: dict[str, Any]) -> float | None:
    sealed = run.get("sealed") or {}
    f1 = sealed.get("object_f1")
    return float(f1["estimate"]) if isinstance(f1, dict) else None


def _arm_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    scores = [s for s in (_sealed_f1(r) for r in runs) if s is not None]
    seconds = sum(r["curve"][-1][0] if r["curve"] else 0.0 for r in runs)
    tokens = sum(int(r["llm"].get("input_tokens", 0)) + int(r["llm"].get("output_tokens", 0)) for r in runs)
    llm_s = sum(float(r["llm"].get("latency_s", 0.0)) for r in runs)  # LLM time, apart from device time
    return {"seeds": len(runs), "sealed_object_f1": [r.get("sealed") for r in runs],
            "mean_sealed_object_f1": sum(scores) / len(scores) if scores else None,
            "best_dev_so_far": [r["curve"][-1][1] if r["curve"] else None for r in runs],
            "dev_wins": sum(int(r.get("dev_wins", 0)) for r in runs),
            "confirm_a_wins": sum(int(r.get("confirm_a_wins", 0)) for r in runs),
            "promoted": sum(int(r["promoted"]) for r in runs),
            "yield": Yield(promoted=sum(int(r["promoted"]) for r in runs), device_seconds=seconds,
                           llm_tokens=tokens, llm_seconds=llm_s).as_dict()}


def verdict_text(arms: dict[str, dict[str, Any]], proposer: str) -> str:
    """One plain paragraph: does the sweep tie or win, and what the agent arm was."""
    agent = arms.get("agent", {}).get("mean_sealed_object_f1")
    sweeps = {a: s["mean_sealed_object_f1"] for a, s in arms.items() if a.startswith("sweep") and
              s["mean_sealed_object_f1"] is not None}
    parts = []
    if agent is None or not sweeps:
        parts.append("Not enough sealed scores to compare the agent arm with the sweep.")
    else:
        arm, best = max(sweeps.items(), key=lambda kv: kv[1])
        if best > agent + TIE_TOLERANCE:
            parts.append(f"The sweep wins: {arm} {best:.3f} against the agent arm's {agent:.3f} (mean sealed object F1).")
        elif best >= agent - TIE_TOLERANCE:
            parts.append(f"The sweep ties: {arm} {best:.3f} against the agent arm's {agent:.3f} "
                         f"(within {TIE_TOLERANCE} object F1).")
        else:
            parts.append(f"The agent arm wins: {agent:.3f} against {arm}'s {best:.3f} (mean sealed object F1).")
    if proposer == "rules":
        parts.append("No LLM was configured: the agent arm was the rules proposer.")
    return " ".join(parts)


def summarise(results: dict[str, list[dict[str, Any]]], *, proposer: str, budget_s: float,
              seeds: int) -> dict[str, Any]:
    arms = {arm: _arm_summary(runs) for arm, runs in results.items()}
    return {"arms": arms, "seeds": seeds, "budget_s_per_arm_and_seed": budget_s, "proposer": proposer,
            "verdict": verdict_text(arms, proposer)}


def write_plot(results: dict[str, list[dict[str, Any]]], path: Path) -> Path:
    """Best-so-far dev object F1 against device-seconds, one colour per arm, one line per seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for colour, (arm, runs) in zip(("C0", "C1", "C2", "C3"), results.items(), strict=False):
        for i, run in enumerate(runs):
            if run["curve"]:
                xs, ys = zip(*run["curve"], strict=True)
                ax.step(xs, ys, where="post", color=colour, alpha=0.8, label=arm if i == 0 else None)
    ax.set_xlabel("device-seconds")
    ax.set_ylabel("best dev object F1 so far")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


__all__ = ["summarise", "verdict_text", "write_plot"]
