"""Fuzzing Tinsmith with hostile model files (graph YAML, weight files, ONNX models) and
comparing random valid models with ONNX Runtime.

`tests/test_fuzz.py` runs a short seeded campaign in the suite; `python -m tests.fuzz
--minutes 10` runs a longer one (see `--help`).
"""
