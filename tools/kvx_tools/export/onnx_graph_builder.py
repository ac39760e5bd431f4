"""A thin layer over onnx.helper for writing graphs node by node.

Node and tensor names follow torch.onnx.export's scheme ("/model/layers.0/self_attn/MatMul",
".../MatMul_output_0") so that exported graphs read like the ones the converter meets in the wild.

Given an ExternalDataFile (external_data_file.py), the builder writes each initializer's bytes there as it is
added and keeps only its place, so that a model of any size is built one weight at a time.
"""

import numpy as np
from onnx import TensorProto, helper, numpy_helper


class OnnxGraphBuilder:
    def __init__(self, external_data=None):
        """external_data: an ExternalDataFile for the initializers' bytes, or None to keep them in the graph."""
        self.external_data = external_data
        self.nodes = []
        self.initializers = []
        self.inputs = []
        self.outputs = []
        self._used_names = set()

    def _unique(self, name):
        candidate, n = name, 0
        while candidate in self._used_names:
            n += 1
            candidate = f"{name}_{n}"
        self._used_names.add(candidate)
        return candidate

    def add_input(self, name, elem_type, shape):
        """shape: ints for fixed dims, strings for symbolic ones."""
        self.inputs.append(helper.make_tensor_value_info(name, elem_type, shape))
        self._used_names.add(name)
        return name

    def add_output(self, name, elem_type, shape):
        self.outputs.append(helper.make_tensor_value_info(name, elem_type, shape))

    def add_initializer(self, name, array):
        """array: a numpy array, or a StreamedWeight (shape, dtype, blocks(): its rows as made) too large to make
        whole."""
        name = self._unique(name)
        if self.external_data is not None and hasattr(array, "blocks"):
            tensor = self.external_data.streamed_tensor(name, array)
        elif self.external_data is not None:
            tensor = self.external_data.tensor(name, array)
        else:
            whole = np.concatenate(list(array.blocks())) if hasattr(array, "blocks") else array
            tensor = numpy_helper.from_array(np.ascontiguousarray(whole), name)
        self.initializers.append(tensor)
        return name

    def op(self, op_type, inputs, scope, outputs=None, **attrs):
        """Appends one node; returns its output name (or the list of names for several outputs).

        scope: torch-style module path, e.g. "/model/layers.0/self_attn". outputs: explicit output
        names (graph outputs); by default one output named after the node.
        """
        node_name = self._unique(f"{scope}/{op_type}")
        if outputs is None:
            outputs = [f"{node_name}_output_0"]
        for out in outputs:
            self._used_names.add(out)
        self.nodes.append(helper.make_node(op_type, list(inputs), list(outputs), name=node_name, **attrs))
        return outputs[0] if len(outputs) == 1 else outputs

    def const(self, value, scope, dtype=np.int64):
        """A Constant node, as torch.onnx.export emits for literals in the forward pass."""
        array = np.asarray(value, dtype=dtype)
        return self.op("Constant", [], scope, value=numpy_helper.from_array(array))

    def build(self, graph_name, opset, ir_version, metadata):
        """The ModelProto; the external data file, if any, is complete and closed."""
        if self.external_data is not None:
            self.external_data.close()
        graph = helper.make_graph(self.nodes, graph_name, self.inputs, self.outputs, self.initializers)
        # com.microsoft (MatMulNBits, GatherBlockQuantized) is imported only by graphs that use it
        domains = sorted({node.domain for node in self.nodes if node.domain})
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains],
            producer_name="kvx-export",
        )
        model.ir_version = ir_version
        helper.set_model_props(model, {k: str(v) for k, v in metadata.items()})
        return model


FLOAT = TensorProto.FLOAT
INT64 = TensorProto.INT64
BOOL = TensorProto.BOOL
