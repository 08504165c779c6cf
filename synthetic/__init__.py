"""The synthetic void generator, dataset versions, tiers and data checks.

Public API: ``generate`` (draw a set), ``generate_split`` (draw it straight into a new split
folder), ``GenParams``/``make_params`` (its parameters), ``GeneratedSet`` (write it as a split
folder); the split-folder format in ``synthetic.splits``; tiers in ``synthetic.tiers``, dataset
versions in ``synthetic.versions``, perceptual hashes in ``synthetic.phash``, checks in
``synthetic.check``, the import's intensity mapping in ``synthetic.mapping`` and a set's
intensity/contrast/noise statistics in ``synthetic.intensity``.
"""

from synthetic._generate import GENERATOR_VERSION, GeneratedSet, generate, generate_split
from synthetic.params import GenParams, make_params, parse_param_args

__all__ = [
    "GENERATOR_VERSION",
    "GenParams",
    "GeneratedSet",
    "generate",
    "generate_split",
    "make_params",
    "parse_param_args",
]
