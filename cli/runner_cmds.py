"""CLI commands for the runner and scheduler: ``device profile``. See docs/cli.md for the contract."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cli._common import HomeOpt, JsonOpt, console, emit_json
from runner.scheduler import DeviceProfile, profile_device, save_profile
from segfactory.errors import UsageError
from segfactory.home import Home
from segfactory.profiles import get_profile

device_app = typer.Typer(
    help="The device the scheduler plans with: its measured memory profile.", no_args_is_help=True
)


def register(app: typer.Typer) -> None:
    """Add this area's commands to the main app."""
    app.add_typer(device_app, name="device")
    device_app.command("profile")(profile_cmd)


def _int_list(text: str, what: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"--{what} must be comma-separated integers, e.g. 4,16; got {text!r}") from None
    if not values or min(values) <= 0:
        raise UsageError(f"--{what} needs at least one positive integer; got {text!r}")
    return values


def _presets(text: str | None) -> list[str]:
    from vision.models import PRESETS, get_preset  # deferred: loads torch

    names = [p.strip() for p in text.split(",") if p.strip()] if text else sorted(PRESETS)
    for name in names:
        get_preset(name)  # UsageError listing the known presets
    return names


def _image_size(home: Home, given: int | None) -> int:
    if given is not None:
        return given

    return get_profile(str(home.info().get("profile", "default"))).image_size if home.exists() else 64


def profile_cmd(
    presets: Annotated[
        str | None, typer.Option("--presets", help="Comma-separated presets (default: all).")
    ] = None,
    batch_sizes: Annotated[
        str, typer.Option("--batch-sizes", help="Batch sizes to measure per preset.")
    ] = "4,16",
    image_size: Annotated[
        int | None, typer.Option("--image-size", min=8, help="Image side (default: the home's profile).")
    ] = None,
    device: Annotated[str, typer.Option("--device", help="auto, cpu or cuda.")] = "auto",
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Measure peak memory against batch size per preset; store it as the home's device_profile.json."""
    if device not in ("auto", "cpu", "cuda"):
        raise UsageError(f"--device must be auto, cpu or cuda; got {device!r}")
    sizes = _int_list(batch_sizes, "batch-sizes")  # flags first: naming presets imports torch
    resolved = Home.resolve(home)
    size = _image_size(resolved, image_size)
    kind = None if device == "auto" else device
    profile = profile_device(_presets(presets), sizes, size, kind)  # type: ignore[arg-type]
    path = save_profile(resolved, profile)
    summary = {
        "home": str(resolved.root),
        "path": str(path),
        "image_size": size,
        **profile.model_dump(mode="json"),
        "fits": {p: _fit(profile, p) for p in sorted({m.preset for m in profile.measurements})},
    }
    if json_out:
        emit_json(summary)
    else:
        _print(profile, str(path), size)


def _fit(profile: Any, preset: str) -> dict[str, float]:
    intercept, slope, size = profile.fit(preset)
    return {"base_bytes": round(intercept), "bytes_per_image": round(slope), "image_size": size}


def _print(profile: DeviceProfile, path: str, size: int) -> None:
    from rich.table import Table

    out = console()
    out.print(
        f"{profile.device}: {profile.device_name}, {profile.total_bytes / 2**30:.1f} GiB; saved to {path}"
    )
    table = Table(title=f"peak memory per training step at {size}x{size}")
    for column in ("preset", "batch", "peak MiB", "seconds"):
        table.add_column(column)
    for m in profile.measurements:
        table.add_row(m.preset, str(m.batch_size), f"{m.peak_bytes / 2**20:.0f}", f"{m.seconds:.1f}")
    out.print(table)
