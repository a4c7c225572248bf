"""The learned placement policy: features, model, training, ONNX export, runtime scorer and Flower apps."""
