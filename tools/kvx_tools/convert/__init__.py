"""ONNX -> kvx model directory: kvx_convert.py drives, graph_mapper.py tells the family (docs/architecture.md)."""
