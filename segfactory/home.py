"""The factory home: where it lives, what it contains, and which profile sized it.

Resolution order: ``--home``, then ``$SEGFACTORY_HOME``, then
``/var/lib/segfactory`` when running as root, else ``$XDG_DATA_HOME/segfactory``
(``~/.local/share/segfactory``). A home inside the source tree is refused: the sandbox mounts
package directories from that tree, and the vault must never be reachable from there.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from segfactory.errors import HomeError

SOURCE_ROOT = Path(__file__).resolve().parent.parent  # the repository checkout
HOME_MARKER = "home.json"


def default_home() -> Path:
    """The home used when ``--home`` is not given."""
    env = os.environ.get("SEGFACTORY_HOME")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/lib/segfactory")
    xdg = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(xdg) / "segfactory"


def _inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Home:
    """Paths of one factory home. Creating the object touches nothing on disk."""

    root: Path

    @classmethod
    def resolve(cls, home: Path | str | None) -> Home:
        """Resolve and validate a home path; refuses one inside the source tree."""
        path = Path(home) if home is not None else default_home()
        path = path.expanduser().resolve()
        if _inside(path, SOURCE_ROOT):
            raise HomeError(
                f"home {path} is inside the source tree {SOURCE_ROOT}; the source tree is "
                "mounted into sandboxes, so the home (and its vault) must live elsewhere. "
                "Pass --home outside it or set SEGFACTORY_HOME."
            )
        return cls(path)

    @property
    def datasets(self) -> Path:
        return self.root / "datasets"

    @property
    def vault(self) -> Path:
        return self.root / "vault"

    @property
    def runs(self) -> Path:
        return self.root / "runs"

    @property
    def audit(self) -> Path:
        return self.root / "audit"

    @property
    def state_db(self) -> Path:
        return self.root / "state.sqlite"

    @property
    def marker(self) -> Path:
        return self.root / HOME_MARKER

    def exists(self) -> bool:
        return self.marker.is_file()

    def info(self) -> dict[str, object]:
        """The home's marker: profile, creation time, layout version."""
        if not self.exists():
            raise HomeError(f"no segfactory home at {self.root}; run `segfactory init` first")
        data: dict[str, object] = json.loads(self.marker.read_text())
        return data

    def run_dir(self, run_id: str) -> Path:
        return self.runs / run_id

    def people_dir(self, run_id: str) -> Path:
        """Reports and milestones: for people only, never in an agent's context."""
        return self.runs / run_id / "people"

    def tickets_dir(self, run_id: str) -> Path:
        return self.runs / run_id / "tickets"
