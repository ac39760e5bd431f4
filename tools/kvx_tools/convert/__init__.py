"""ONNX -> kvx model directory: pipeline.py drives, families/dispatch.py tells the family (docs/architecture.md)."""
