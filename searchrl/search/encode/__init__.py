"""Query and passage encoders: model profiles, sentence-transformers, ONNX Runtime."""
