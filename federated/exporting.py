"""torch -> one self-contained ONNX file (opset 17) -> int8 with onnxruntime quantization -> a verified artifact.

The ONNX graph takes ``pod`` (1, P) and ``nodes`` (N, F) with N dynamic and returns ``scores`` (N,).
Quantization is dynamic (int8 weights, activations quantized per call): the per-candidate MLP
and the pod context are MatMuls and get quantized, while the linear skip (an elementwise product
and sum that carries the heuristic's score) stays fp32 — its precision decides integer score ties.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import onnx
import torch
from onnxruntime.quantization import QuantType, quant_pre_process, quantize_dynamic

from fedcore.scheduling.fragmentation import PodTypes
from federated.model import PlacementScorer
from federated.runtime import artifacts
from federated.runtime.features import NODE_FEATURES, POD_FEATURES

OPSET = 17


def to_onnx(model: PlacementScorer, path: Path) -> None:
    """Export fp32 with the candidate axis dynamic, weights embedded (no external data files)."""
    model.eval()
    example = (torch.zeros(1, len(POD_FEATURES)), torch.zeros(8, len(NODE_FEATURES)))
    torch.onnx.export(
        model, example, str(path), dynamo=False, opset_version=OPSET,
        input_names=["pod", "nodes"], output_names=["scores"],
        dynamic_axes={"nodes": {0: "candidates"}, "scores": {0: "candidates"}},
    )
    compact(path)


def compact(path: Path) -> None:
    """Rename internal tensors to short ids and drop shape annotations and doc strings.

    Exporter and quantizer names ("/context/context.2/MatMul_output_0_quantized") are a large
    share of a small model's file; both files get the same treatment, so sizes stay comparable.
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
    for i, node in enumerate(graph.node):
        node.name = f"n{i}"
        node.doc_string = ""
        node.input[:] = [short(x) for x in node.input]
        node.output[:] = [short(x) for x in node.output]
    del graph.value_info[:]
    proto.doc_string = ""
    onnx.checker.check_model(proto, full_check=True)
    onnx.save(proto, str(path))


def quantize(fp32: Path, int8: Path) -> None:
    """Dynamic int8 quantization of the MatMuls (after onnxruntime's pre-processing)."""
    with tempfile.TemporaryDirectory() as tmp:
        prepared = Path(tmp) / "prepared.onnx"
        quant_pre_process(str(fp32), str(prepared), skip_symbolic_shape=False)
        quantize_dynamic(str(prepared), str(int8), weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul", "Gemm"])
    compact(int8)


def export(model: PlacementScorer, out: Path, types: PodTypes, training: dict[str, Any]) -> dict[str, Any]:
    """Write ``out/model.fp32.onnx``, ``out/model.int8.onnx`` and ``out/manifest.json``; returns the manifest."""
    out.mkdir(parents=True, exist_ok=True)
    fp32, int8 = out / artifacts.FP32, out / artifacts.INT8
    to_onnx(model, fp32)
    quantize(fp32, int8)
    return artifacts.write_manifest(out, types, training)

