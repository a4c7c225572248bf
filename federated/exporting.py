"""torch -> one self-contained ONNX file (opset 17) -> int8 with onnxruntime quantization -> a verified artifact.

The ONNX graph takes ``pod`` (1, P) and ``nodes`` (F, N) feature-major with N dynamic and returns
``scores`` (N,).

Quantization is weight-only: every layer's weight matrix is stored as int8 (symmetric, one scale
per output unit) behind a DequantizeLinear, and activations stay fp32. Measured on 1,523
candidates, onnxruntime's dynamic quantization (activations quantized per call) made a decision
slower than fp32 (172 vs 128 us): the per-candidate layers are too narrow for int8 GEMMs to pay
for quantizing their inputs. The file shrinks as much, which is what an edge node needs. The
linear skip's weights (an elementwise product and sum that carries the heuristic's score) stay
fp32: their precision decides integer score ties.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from onnx import helper, numpy_helper

from fedcore.scheduling.fragmentation import PodTypes
from federated.model import PlacementScorer
from federated.runtime import artifacts
from federated.runtime.features import NODE_FEATURES, POD_FEATURES

OPSET = 17


def to_onnx(model: PlacementScorer, path: Path) -> None:
    """Export fp32 with the candidate axis dynamic, weights embedded (no external data files)."""
    model.eval()
    example = (torch.zeros(1, len(POD_FEATURES)), torch.zeros(len(NODE_FEATURES), 8))
    torch.onnx.export(
        model, example, str(path), dynamo=False, opset_version=OPSET,
        input_names=["pod", "nodes"], output_names=["scores"],
        dynamic_axes={"nodes": {1: "candidates"}, "scores": {0: "candidates"}},
    )
    compact(path)


def compact(path: Path) -> None:
    """Rename internal tensors to short ids and drop node names, shape annotations, doc strings and the producer.

    Exporter and quantizer names ("/context/context.2/MatMul_output_0_quantized") are a large
    share of a small model's file; both files get the same treatment, so sizes stay comparable.
    Node names and the producer's name and version are optional in ONNX (tensors name the edges,
    onnxruntime names nodes itself); the graph's name is required, so it becomes one letter.
    """
    proto = onnx.load(str(path))
    graph = proto.graph
    keep = {v.name for v in graph.input} | {v.name for v in graph.output}
    names: dict[str, str] = {}

    def short(name: str) -> str:
        if not name or name in keep:
            return name
        return names.setdefault(name, f"t{len(names)}")

    for tensor in graph.initializer:
        tensor.name = short(tensor.name)
        tensor.doc_string = ""
    for node in graph.node:
        node.name = ""
        node.doc_string = ""
        node.input[:] = [short(x) for x in node.input]
        node.output[:] = [short(x) for x in node.output]
    del graph.value_info[:]
    graph.name = "g"
    proto.doc_string = proto.producer_name = proto.producer_version = ""
    onnx.checker.check_model(proto, full_check=True)
    onnx.save(proto, str(path))


def quantize(fp32: Path, int8: Path) -> None:
    """Store every Gemm/MatMul weight matrix of ``fp32`` as int8 behind a DequantizeLinear (per output unit, symmetric)."""
    proto = onnx.load(str(fp32))
    graph = proto.graph
    weights = {t.name: t for t in graph.initializer}
    matrices = {n.input[1] for n in graph.node if n.op_type in ("Gemm", "MatMul") and n.input[1] in weights and len(weights[n.input[1]].dims) == 2}
    dequantize = []
    for name in sorted(matrices):
        tensor = weights[name]
        w = numpy_helper.to_array(tensor).astype(np.float32)
        transposed = any(n.op_type == "Gemm" and n.input[1] == name and _attr(n, "transB") for n in graph.node)
        axis = 0 if transposed else 1  # the output-unit axis: (out, in) when Gemm transposes B, else (in, out)
        scale = np.maximum(np.abs(w).max(axis=1 - axis), 1e-12) / 127.0
        q = np.clip(np.rint(w / np.expand_dims(scale, 1 - axis)), -127, 127).astype(np.int8)
        graph.initializer.remove(tensor)
        graph.initializer.extend([
            numpy_helper.from_array(q, f"{name}_q"),
            numpy_helper.from_array(scale.astype(np.float32), f"{name}_scale"),
        ])  # no zero point input: symmetric, and the spec's default is 0
        dequantize.append(helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_scale"], [name], axis=axis))
    rest = list(graph.node)
    del graph.node[:]
    graph.node.extend(dequantize + rest)  # dequantize first: the graph stays topologically sorted
    onnx.save(proto, str(int8))
    compact(int8)


def _attr(node: onnx.NodeProto, name: str) -> int:
    return next((int(a.i) for a in node.attribute if a.name == name), 0)


def export(model: PlacementScorer, out: Path, types: PodTypes, training: dict[str, Any]) -> dict[str, Any]:
    """Write ``out/model.fp32.onnx``, ``out/model.int8.onnx`` and ``out/manifest.json``; returns the manifest."""
    out.mkdir(parents=True, exist_ok=True)
    fp32, int8 = out / artifacts.FP32, out / artifacts.INT8
    to_onnx(model, fp32)
    quantize(fp32, int8)
    return artifacts.write_manifest(out, types, training)

