"""The policy runtime: features, artifact loading and ONNX scoring with numpy and onnxruntime only (no torch, no flwr)."""
