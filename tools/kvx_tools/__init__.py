"""kvx's Python tools: the exporters to ONNX (export), the ONNX -> kvx converter (convert), the test fixture
generators (fixtures) and the benchmark drivers (bench). Each command runs as `python -m kvx_tools.SUB.MODULE`;
the converter as `python -m kvx_tools.convert`, which is what `kvx convert` runs."""
