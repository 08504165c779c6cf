"""Declared dependencies: the checkpoint stack is pinned past its known flaws, and every import is
declared."""

from __future__ import annotations

import ast
import importlib.util
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
# The first release of each package free of the deserialisation and injection flaws that reach
# checkpoints (see the comment in pyproject.toml).
FIXED = {"langgraph": "1.0.10", "langgraph-checkpoint": "4.0.0", "langgraph-checkpoint-sqlite": "3.0.1"}
# import name -> distribution name, where the two differ.
DISTRIBUTION = {"yaml": "pyyaml", "PIL": "pillow"}


def _requirements() -> dict[str, Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return {Requirement(r).name.lower(): Requirement(r) for r in project["dependencies"]}


def test_the_sqlite_checkpointer_is_pinned_to_one_fixed_version() -> None:
    req = _requirements()["langgraph-checkpoint-sqlite"]
    specs = list(req.specifier)
    assert len(specs) == 1 and specs[0].operator == "==", f"not an exact pin: {req}"
    assert Version(specs[0].version) >= Version(FIXED["langgraph-checkpoint-sqlite"])
    assert metadata.version("langgraph-checkpoint-sqlite") == specs[0].version


def test_no_declared_range_admits_a_flawed_checkpoint_release() -> None:
    reqs = _requirements()
    for name, fixed in FIXED.items():
        assert name in reqs, f"{name} is not declared"
        below = Version(fixed).release
        flawed = Version(f"{below[0]}.{below[1]}.{below[2] - 1}" if below[2] else f"{below[0] - 1}.99.99")
        assert flawed not in reqs[name].specifier, f"{reqs[name]} admits {flawed}, which has a known flaw"
        assert Version(metadata.version(name)) >= Version(fixed), f"installed {name} is older than {fixed}"


def _first_party() -> tuple[str, ...]:
    """Our packages, from the one list that ``make lint``'s checks use (scripts/check_imports.py)."""
    spec = importlib.util.spec_from_file_location("check_imports", REPO / "scripts" / "check_imports.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return tuple(module.FIRST_PARTY)


def _third_party_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {
        n.module.split(".")[0]
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and n.module and not n.level
    }
    first_party = {*_first_party(), "__future__"}
    return {n for n in names if n not in first_party and n not in sys.stdlib_module_names}


def test_the_llm_capture_imports_only_declared_packages() -> None:
    declared = set(_requirements())
    imported = _third_party_imports(REPO / "agents" / "_capture.py")
    assert imported, "the capture imports no HTTP library at all?"
    missing = {DISTRIBUTION.get(n, n).lower() for n in imported} - declared
    assert not missing, f"agents/_capture.py imports undeclared packages: {sorted(missing)}"


def _lock() -> dict[str, str]:
    rows = [
        line.split("==", 1)
        for line in (REPO / "requirements.lock").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    return {name.lower(): version for name, version in rows}


def test_every_declared_dependency_is_locked_inside_its_range() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    lock = _lock()
    for text in [*project["dependencies"], *project["optional-dependencies"]["dev"]]:
        req = Requirement(text)
        name = req.name.lower().replace("_", "-")
        assert name in lock, f"{req.name} is declared but not in requirements.lock; run `make lock`"
        assert Version(lock[name]) in req.specifier, f"locked {name}=={lock[name]} is outside {req}"


def test_the_scoring_stack_runs_at_its_locked_versions() -> None:
    # verdicts depend on these: a machine that drifted from the lock scores differently
    lock = _lock()
    for name in ("numpy", "scipy", "torch"):
        assert metadata.version(name).split("+")[0] == lock[name], f"{name} drifted from requirements.lock"
    runtimes = {
        d.metadata["Name"].lower(): d.version
        for d in metadata.distributions()
        if d.metadata["Name"].lower() in ("onnxruntime", "onnxruntime-gpu")
    }
    assert runtimes and all(v == lock["onnxruntime"] for v in runtimes.values()), runtimes
