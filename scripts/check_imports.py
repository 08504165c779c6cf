"""First-party imports sit at the top of each module, or say why they cannot.

An import written inside a function hides a dependency from the reader and, before the layers
contract existed, hid import cycles too. So every import of our own packages inside a function
or class is refused unless its line carries a ``# deferred: <why>`` comment (a pinned copy that
must be verified before its code is imported, say). Heavy third-party imports (torch,
onnxruntime, langgraph) may stay inside functions without a comment.

``cli/`` keeps ``segfactory --help`` fast another way: it imports only the module of the command
being run (``cli/__init__.py``), and a command module defers, with a comment, only the modules
that load torch or numba at import time.

Exit status 1 and one line per offending import; ``make lint`` runs it.
"""

from __future__ import annotations

import ast
import io
import sys
import tokenize
from pathlib import Path

FIRST_PARTY = (
    "segfactory",
    "synthetic",
    "vision",
    "analysis",
    "gate",
    "runner",
    "sandbox",
    "audit",
    "agents",
    "console",
    "controls",
    "cli",
)
MARK = "deferred:"


def first_party(node: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] in FIRST_PARTY
    return any(alias.name.split(".")[0] in FIRST_PARTY for alias in node.names)


def comments_by_line(source: str) -> dict[int, str]:
    found: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            found[tok.start[0]] = tok.string
    return found


def nested_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Imports inside a function or class body (``if TYPE_CHECKING:`` blocks at top level are fine)."""
    out: list[ast.Import | ast.ImportFrom] = []
    for top in tree.body:
        if isinstance(top, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.extend(n for n in ast.walk(top) if isinstance(n, ast.Import | ast.ImportFrom))
    return out


def problems(path: Path, source: str) -> list[str]:
    comments = comments_by_line(source)
    out = []
    for node in nested_imports(ast.parse(source, str(path))):
        if not first_party(node):
            continue
        span = range(node.lineno, (node.end_lineno or node.lineno) + 1)
        if any(MARK in comments.get(line, "") for line in span):
            continue
        what = ast.unparse(node)
        out.append(
            f"{path}:{node.lineno}: first-party import inside a function: `{what}` "
            f"(move it to the top, or say why with `# {MARK} ...`)"
        )
    return out


def main(root: Path) -> int:
    found = []
    for package in FIRST_PARTY:
        for path in sorted((root / package).rglob("*.py")):
            found.extend(problems(path.relative_to(root), path.read_text()))
    for line in found:
        sys.stdout.write(line + "\n")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path.cwd()))
