"""Models, training, ONNX export, metrics and the robustness suite.

Import the submodules directly: ``vision.metrics`` and ``vision.onnx_infer`` need only numpy,
scipy and onnxruntime; ``vision.train``, ``vision.models`` and ``vision.export`` import torch.

- ``vision.metrics``: ``per_image_metrics``, ``aggregate``, ``PerImage``
- ``vision.slices``: ``worst_slice``
- ``vision.onnx_infer``: ``predict`` (the ONNX model contract: ``image`` -> ``prob``)
- ``vision.tiling``: ``predict_batched`` (pixel-bounded batches; a large image in overlapping tiles)
- ``vision.train``: ``train(config, data_dir, out_dir)`` -> ``TrainResult``
- ``vision.config``: ``TrainConfig``, ``load_config``
- ``vision.models``: ``PRESETS``, ``REFERENCE_PRESET``, ``build_model``
- ``vision.evaluate``: ``evaluate`` (the ``segfactory evaluate`` report)
"""
