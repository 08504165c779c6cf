"""Packaging: one ONNX model from trained members, for a ticket that trains nothing.

``vision.packaging.build.package(member_paths, data_dir, out_dir, spec)`` averages the members'
probabilities over the image and its flipped views, chooses a threshold and a minimum component
size on the images carved from the train split (never dev), and folds both into the graph,
within the gate's intake rules (allowlisted standard ops only, one input ``image``, one output
``prob``). It imports onnx and onnxruntime, so it is imported by name where it runs: in the
sandbox, as ``python -m vision.packaging --members DIR --data DIR --out DIR --spec FILE``
(``runner``'s packaging ticket). This module holds what the host needs without them: the spec
and its limits. See docs/training.md.
"""

from vision.packaging.spec import (
    HOST_KEYS,
    MAX_MEMBERS,
    MAX_MIN_SIZE,
    MAX_PACKAGE_BYTES,
    MIN_CHOICE_IMAGES,
    PackageRefused,
    PackageSpec,
)

__all__ = [
    "HOST_KEYS",
    "MAX_MEMBERS",
    "MAX_MIN_SIZE",
    "MAX_PACKAGE_BYTES",
    "MIN_CHOICE_IMAGES",
    "PackageRefused",
    "PackageSpec",
]
