"""Results that cross a package boundary are records, not ``dict[str, Any]``.

Lists every public function or method that another top-level package imports (directly, or as a
method of a class it imports) and that takes or returns ``dict[str, Any]`` (or a list, mapping
or optional of one). Each must be named in ``scripts/boundaries-allowed.txt`` with the kind of
dict it is: ``payload`` (free-form JSON by design, an audit event's body), ``config`` (a
training config mapping before validation) or ``rows`` (a split's metadata rows). A result has
no kind to be listed under: it crosses as a record.
A new one fails ``make lint``; so does an entry that no longer matches, so the list only shrinks.

``python scripts/check_boundaries.py [ROOT]``: exit 1 with one line per difference.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

from check_imports import FIRST_PARTY  # scripts/ is this script's sys.path[0]

PACKAGES = FIRST_PARTY
ALLOWED = "scripts/boundaries-allowed.txt"
KINDS = ("payload", "config", "rows")


def module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def untyped(annotation: ast.expr | None) -> bool:
    text = ast.unparse(annotation) if annotation is not None else ""
    return any(f"{kind}[str, Any]" in text for kind in ("dict", "Dict", "Mapping", "MutableMapping"))


def imported_names(root: Path) -> dict[tuple[str, str], set[str]]:
    """(module, name) -> the top-level packages that import ``name`` from ``module``."""
    users: dict[tuple[str, str], set[str]] = defaultdict(set)
    for package in PACKAGES:
        for path in (root / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    for alias in node.names:
                        users[(node.module, alias.name)].add(package)
    return users


def crossing(root: Path) -> set[str]:
    """``module.function`` or ``module.Class.method`` for every untyped crossing."""
    users = imported_names(root)
    found = set()
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            module = module_name(root, path)
            for top in ast.parse(path.read_text(), str(path)).body:
                if isinstance(top, ast.FunctionDef):
                    members = [(top.name, top)]
                elif isinstance(top, ast.ClassDef):
                    members = [
                        (f"{top.name}.{f.name}", f) for f in top.body if isinstance(f, ast.FunctionDef)
                    ]
                else:
                    continue
                importers = {
                    p
                    for (mod, name), who in users.items()
                    if name == top.name and (mod == module or module.startswith(mod + "."))
                    for p in who
                } - {package}
                if not importers:
                    continue
                for name, fn in members:
                    if fn.name.startswith("_") and not fn.name.startswith("__"):
                        continue
                    args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
                    if untyped(fn.returns) or any(untyped(a.annotation) for a in args):
                        found.add(f"{module}.{name}")
    return found


def allowed(root: Path) -> tuple[dict[str, str], list[str]]:
    entries, bad = {}, []
    for number, line in enumerate((root / ALLOWED).read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, _, kind = line.partition(" ")
        if kind.strip() not in KINDS:
            bad.append(f"{ALLOWED}:{number}: kind must be one of {', '.join(KINDS)}: {line!r}")
        entries[name] = kind.strip()
    return entries, bad


def main(root: Path) -> int:
    found = crossing(root)
    entries, problems = allowed(root)
    problems += [
        f"{name}: takes or returns dict[str, Any] across packages; return a record "
        f"(or list it in {ALLOWED} with its kind)"
        for name in sorted(found - set(entries))
    ]
    problems += [
        f"{ALLOWED}: {name} no longer crosses untyped; remove its line"
        for name in sorted(set(entries) - found)
    ]
    for line in problems:
        sys.stdout.write(line + "\n")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path.cwd()))
