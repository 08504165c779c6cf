"""Between the analysis and the proposer: each recommendation as a concrete change of the incumbent.

``Realiser.realise`` turns the analysis's recommendations into changes through the action
catalogue (``agents.actions``, ``policies/actions.yaml``) and the home (``agents._realise``:
curation versions, reviewed labels, top-up specs). A recommendation already tried on this
incumbent, or one the catalogue cannot carry out, becomes no ticket: it is recorded in
``people/not_executable.jsonl`` and the audit log with its reason, once.
"""

from __future__ import annotations

from agents import _realise
from agents.actions import Catalogue, NotExecutable, load_catalogue
from agents.context import DevAnalysis
from agents.lineage import LineagePlanner
from agents.run_setup import RunSetup
from segfactory.layout import NotExecutableRow
from segfactory.records import canonical_json

MAX_REASON_CHARS = 160  # a refusal as the progress line shows it; the file keeps it whole


class Realiser:
    def __init__(self, setup: RunSetup, lineage: LineagePlanner) -> None:
        self.setup, self.lineage = setup, lineage
        self._catalogue: Catalogue | None = None

    def catalogue(self) -> Catalogue:
        """The action catalogue, parsed once (a catalogue that does not parse stops the run at start)."""
        if self._catalogue is None:
            self._catalogue = load_catalogue()
        return self._catalogue

    def realise(self, analysis: DevAnalysis) -> DevAnalysis:
        """The analysis with each recommendation as a concrete change of the incumbent."""
        incumbent = self.lineage.incumbent()
        on_it = {tid for tid, row in self.lineage.lineage().items() if row.parent_sha256 == incumbent.sha256}
        tried = {canonical_json(t.change).decode() for t in self.setup.layout.started() if t.id in on_it}
        realised, refused = _realise.realise_all(
            self.setup, self.catalogue(), analysis.recommendations, incumbent, tried
        )
        for item in refused:
            self._not_executable(item, incumbent.sha256)
        return analysis.model_copy(update={"recommendations": tuple(realised)})

    def _not_executable(self, item: NotExecutable, incumbent: str) -> None:
        layout = self.setup.layout
        key = (item.recommendation_id, item.reason)
        if any((r.recommendation_id, r.reason) == key for r in layout.not_executable()):
            return
        layout.append_not_executable(NotExecutableRow(**item.model_dump(mode="json"), incumbent=incumbent))
        self.setup.audit_event("recommendation_not_executable", item.model_dump(mode="json"))
        self.setup.progress(
            f"  recommendation {item.recommendation_id}: not executable: {item.reason[:MAX_REASON_CHARS]}"
        )


__all__ = ["Realiser"]
