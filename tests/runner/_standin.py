"""A worker stand-in: what a ticket's sandboxed code might do, run under a real rlimit.

``python _standin.py --work W --train T --mode M`` reads ``W/config.yaml`` like the real worker,
allocates ``batch_size * MIB_PER_SAMPLE`` MiB (touching every page), then writes ``W/out``:
a real ONNX model (prob = sigmoid(GAIN * (image - 0.55))) and a result.json with a fake perfect
score. Modes plant what a hostile worker would: a symlink or a FIFO instead of model.onnx, or a
symlink instead of config.yaml (which the host rewrites before a retry), or a symlink instead of
the checkpoint (``model.safetensors``, which it writes otherwise, unless ``no-checkpoint``);
``seeded`` writes a model whose shift depends on the config's seed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np
import yaml

MIB_PER_SAMPLE = 32
GAIN = 40.0


def tiny_model(shift_value: float = 0.55) -> bytes:
    from onnx import TensorProto, helper

    image = helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 1, "H", "W"])
    prob = helper.make_tensor_value_info("prob", TensorProto.FLOAT, ["N", 1, "H", "W"])
    shift = helper.make_tensor("shift", TensorProto.FLOAT, [], [shift_value])
    gain = helper.make_tensor("gain", TensorProto.FLOAT, [], [GAIN])
    nodes = [
        helper.make_node("Sub", ["image", "shift"], ["centred"]),
        helper.make_node("Mul", ["centred", "gain"], ["logit"]),
        helper.make_node("Sigmoid", ["logit"], ["prob"]),
    ]
    graph = helper.make_graph(nodes, "standin", [image], [prob], initializer=[shift, gain])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--mode", default="honest")
    parser.add_argument("--target", default="/etc/passwd")
    parser.add_argument("--mib-per-sample", type=int, default=MIB_PER_SAMPLE)
    args = parser.parse_args()
    config = yaml.safe_load((args.work / "config.yaml").read_text())
    if args.mode == "plant-config":  # a later host write of config.yaml must not follow this
        (args.work / "config.yaml").unlink()
        os.symlink(args.target, args.work / "config.yaml")
    out = args.work / "out"
    out.mkdir()  # like vision.worker: a leftover output folder from an earlier attempt is an error
    (out / "learning_curve.jsonl").write_text("")
    block = np.ones(config["batch_size"] * args.mib_per_sample * 2**20, dtype=np.uint8)  # touches every page
    (out / "result.json").write_text(
        json.dumps({"usable": True, "dev_metrics": {"object_f1": 0.999}, "allocated": int(block.size)})
    )
    checkpoint = out / "model.safetensors"  # the host only hashes it; these bytes stand in for weights
    if args.mode == "symlink-checkpoint":
        os.symlink(args.target, checkpoint)
    elif args.mode != "no-checkpoint":
        checkpoint.write_bytes(f"weights of seed {config['seed']}".encode())
    model = out / "model.onnx"
    if args.mode == "symlink":
        os.symlink(args.target, model)
    elif args.mode == "fifo":
        os.mkfifo(model)
    elif args.mode == "seeded":  # one model per seed: ensemble members that differ
        model.write_bytes(tiny_model(0.5 + 0.01 * (config["seed"] % 10)))
    else:
        model.write_bytes(tiny_model())
    sys.stdout.write(f"trained at batch {config['batch_size']}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
