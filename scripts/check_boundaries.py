"""Packages meet at their public names, and results that cross are records, not ``dict[str, Any]``.

Three checks, each failing ``make lint`` with one line per difference:

1. **Facades hold.** No module imports a ``_``-named module or name of another top-level
   package (``from runner._execute import x``, ``from synthetic.splits import _rows``), not even
   inside a function: what another package needs is promoted to its public API. Tests are
   exempt: they mirror the folders and test the insides.
2. **Typed crossings.**
Lists every public function or method that another top-level package imports (directly, or as a
method of a class it imports) and that takes or returns ``dict[str, Any]`` (or a list, mapping
or optional of one). Each must be named in ``scripts/boundaries-allowed.txt`` with the kind of
dict it is: ``payload`` (free-form JSON by design, an audit event's body), ``config`` (a
training config mapping before validation) or ``rows`` (a split's metadata rows). A result has
no kind to be listed under: it crosses as a record.
A new one fails ``make lint``; so does an entry that no longer matches, so the list only shrinks.

3. **The count only falls.** ``dict[str, Any]`` written anywhere in the tree (packages, tests,
   benchmarks, scripts) is counted; the count must equal the ceiling on the ``# untyped-dicts:``
   line of the allowed list. More fails; fewer fails too, until the ceiling is lowered to match,
   so a conversion is locked in by the change that makes it.

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
CEILING_MARK = "# untyped-dicts:"
COUNTED = (*FIRST_PARTY, "tests", "benchmarks", "scripts")  # where dict[str, Any] is counted
UNTYPED = ("dict[str, Any]", "Dict[str, Any]")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_crossings(root: Path) -> list[str]:
    """``path:line: what`` for every import of another package's private module or name."""
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                for module, names in _imported(node):
                    parts = module.split(".")
                    if parts[0] not in PACKAGES or parts[0] == package:
                        continue
                    hidden = [p for p in parts[1:] if _private(p)] + [n for n in names if _private(n)]
                    if hidden:
                        where = f"{path.relative_to(root)}:{node.lineno}"  # type: ignore[attr-defined]
                        found.append(
                            f"{where}: imports {', '.join(hidden)} from {module}, private to {parts[0]}"
                        )
    return found


def _imported(node: ast.AST) -> list[tuple[str, list[str]]]:
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        return [(node.module, [a.name for a in node.names])]
    if isinstance(node, ast.Import):
        return [(a.name, []) for a in node.names]
    return []


def untyped_count(root: Path) -> int:
    total = 0
    for top in COUNTED:
        for path in (root / top).rglob("*.py"):
            if ".venv" not in path.parts:
                text = path.read_text()
                total += sum(text.count(u) for u in UNTYPED)
    return total


def ceiling(root: Path) -> int | None:
    for line in (root / ALLOWED).read_text().splitlines():
        if line.startswith(CEILING_MARK):
            return int(line[len(CEILING_MARK) :].strip())
    return None


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
    problems += private_crossings(root)
    count, cap = untyped_count(root), ceiling(root)
    if cap is None:
        problems.append(f"{ALLOWED}: no '{CEILING_MARK} N' line (the ceiling of dict[str, Any] in the tree)")
    elif count > cap:
        problems.append(
            f"dict[str, Any] is written {count} times, above the ceiling {cap}: type what you added"
        )
    elif count < cap:
        problems.append(
            f"dict[str, Any] is written {count} times, under the ceiling {cap}: lower it to {count}"
        )
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
