"""The loop's steps, one module each, in the order a ticket meets them.

``analyse`` and ``propose`` (``agents.steps.propose``) fill the queue from the current best's dev
analysis, approved data requests and answered escalations; ``run`` (``agents.steps.train``)
trains the next ticket or batch through the host services; ``gate`` and ``judge``
(``agents.steps.judge``) spend a query on a dev win and decide by the coded rule; ``record``
(``agents.steps.record``) appends the verdict and applies the stop rules; then ``milestone``
and ``report``. ``agents.graph`` wires them into a LangGraph ``StateGraph``.
"""

from agents.steps.judge import JudgeStep
from agents.steps.propose import ProposeStep
from agents.steps.record import RecordStep
from agents.steps.train import TrainStep

__all__ = ["JudgeStep", "ProposeStep", "RecordStep", "TrainStep"]
