"""The ONNX backend node tests run against Tinsmith (see run.py and docs/CONFORMANCE.md)."""
