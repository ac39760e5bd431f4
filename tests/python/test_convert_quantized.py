#!/usr/bin/env python3
"""Quantized weights through the converter (docs/model-format.md, "Quantized matrices"), on the graphs of
testdata/quantized/ (ONNX Runtime's MatMulNBitsQuantizer at 4 and 8 bits, blocks 16, 32 and 128, symmetric
and not; its blockwise DequantizeLinear form; ORT GenAI's builder at int4), each with ORT's logits.

  - the integers, scales and zero points the converter stores are ORT's, read back from the file in the
    documented packing and compared with the graph's initializers in ORT's;
  - `--quantize int4|int8` of the fp32 graph those fixtures were made from gives the same tensors as the
    converter stores for ORT's quantized graph, so kvx's RTN quantizer is ORT's;
  - a numpy forward pass over the directory, its matrices dequantized as the document says
    (kvx_quantized_reading.py), gives ORT's logits (1e-4 x max|ORT|): every matrix sits in its place;
  - the engine (KVX_BIN): `kvx logits --simd reference` within 1e-4 x max|ORT| of ORT, and the default
    kernels, which quantize activations to int8 blocks of 32, within the error ORT itself makes doing so
    (accuracy_level 4 against 0, measured per fixture by regenerate.py; 1.5x where ORT's activation blocks
    are 16) and, where the weights' blocks are 32 too, within 1e-4 of ORT's accuracy_level 4 itself (but for
    ROUNDS_UNLIKE_ORT); skipped, saying so, while the engine cannot load quantized matrices;
  - bad quantized nodes stop the converter with one line.
The whole file converts in-process (the CLI once, for its flags): under ten seconds.
"""

import json
import os
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper
from safetensors.numpy import load_file

from kvx_test_support import REPO, assert_one_line_failure, convert
import kvx_quantized_reading
import numpy_llama

from kvx_tools.convert.pipeline import convert as convert_in_process
from kvx_tools.convert.quantized.choice import bits_for
from kvx_tools.convert.quantized.rtn import quantize_rtn
from kvx_tools.convert.quantized.matrix import from_unsigned_blocks

FIXTURES = REPO / "testdata" / "quantized"
KVX = os.environ.get("KVX_BIN")
REFERENCE_TOLERANCE = 1e-4  # x max|ORT|: fp32 products in another order
NBITS = sorted(p.name for p in FIXTURES.glob("nbits-*"))
# Weight block size -> how far kvx's default kernels may exceed ORT's accuracy_level-4 error where ORT rounds the
# activations in blocks of that size and kvx in blocks of 32: measured 1.14x .. 1.38x at 16 (kvx's coarser
# blocks), 0.57x .. 1.001x at 128 (kvx's finer ones; the one above 1 by 2e-5 of max|ORT|, within the summation
# allowance). Running the 16 fixtures within 1.0x needs activations rounded per 16 for such weights.
ACTIVATION_BLOCKS_DIFFER = {16: 1.5}
# Block-32 fixtures where kvx's default kernels do not reproduce ORT's accuracy_level 4 although both round the
# activations per 32. nbits-4-b32-sym was one (1.3e-2 of max|ORT| against ORT acc4: an activation rounded one
# apart at position 4, carried by the KV cache) until q4 block-32 matrices ran in row groups
# (cpu/kernels/quant_row_groups.inc), which sum each block's integer dot product and scale it in fp32 as MLAS
# does: measured 3.3e-7 since. The rounding of x was never the cause; the order of the fp32 sums was.
ROUNDS_UNLIKE_ORT = set()
ALL = [*NBITS, "qdq-4-b32-asym", "builder-int4-llama-tied"]


def fixture(name):
    folder = FIXTURES / name
    return folder, json.loads((folder / "fixture.json").read_text()), json.loads((folder / "prompt.json").read_text())


def relative(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


def acc4_tolerance(name):
    """ORT's own error when it quantizes activations: max |acc4 - acc0| / max |acc0| of the fixture."""
    folder = FIXTURES / name
    return relative(np.load(folder / "ort_acc4.npy"), np.load(folder / "ort_acc0.npy"))


def file_accuracy_level(folder):
    """The accuracy_level the graph's MatMulNBits nodes carry (the builder writes 4), 0 where unset."""
    levels = {helper.get_attribute_value(a) for n in onnx.load(folder / "model.onnx", load_external_data=False).graph.node
              if n.op_type == "MatMulNBits" for a in n.attribute if a.name == "accuracy_level"}
    return max(levels, default=0)


def ort_matmulnbits_integers(model):
    """[(q [N, K] unsigned, scales [N, n]) ...] of every MatMulNBits node, read in ORT's layout: elements 2t
    and 2t + 1 of a block in byte t, low nibble first."""
    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    found = []
    for node in model.graph.node:
        if node.op_type != "MatMulNBits":
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        packed = values[node.input[1]]
        if attrs["bits"] == 4:
            q = np.stack([packed & 15, packed >> 4], axis=-1).reshape(attrs["N"], -1)
        else:
            q = packed.reshape(attrs["N"], -1)
        found.append((q[:, :attrs["K"]].astype(np.int16), values[node.input[2]].reshape(attrs["N"], -1)))
    return found


def kvx_integers(tensors, name, cols):
    """(q [rows, cols] in ORT's unsigned terms, scales [rows, blocks of the graph]) of kvx matrix name."""
    if f"{name}.q4" in tensors:
        packed = tensors[f"{name}.q4"]
        groups = packed.reshape(packed.shape[0], -1, 16)
        q = np.concatenate([groups & 15, groups >> 4], axis=2).reshape(packed.shape[0], -1).astype(np.int16)
    else:
        q = tensors[f"{name}.q8"].astype(np.int16) + 128
    return q[:, :cols], tensors[f"{name}.scales"]


class QuantizedConversion(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory()
        cls.tmp = Path(cls._tmp.name)
        cls.converted = {}
        for name in ALL:
            folder, meta, _ = fixture(name)
            out = cls.tmp / name
            convert_in_process(folder / "model.onnx", out, max_seq_len=meta["context_length"])
            cls.converted[name] = out

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def load(self, name):
        out = self.converted[name]
        return json.loads((out / "config.json").read_text()), load_file(str(out / "model.safetensors"))

    def test_stored_integers_are_the_graphs(self):
        """Every quantized matrix of a MatMulNBits graph holds one node's integers and scales (rows in order,
        nibbles reordered, 8-bit shifted back), with the zero-scale padding block where B = 16 needs one."""
        for name in NBITS:
            with self.subTest(name):
                folder, meta, _ = fixture(name)
                config, tensors = self.load(name)
                ort = ort_matmulnbits_integers(onnx.load(folder / "model.onnx"))
                cols = kvx_quantized_reading.llama_cols(config)
                names = matrices_of(tensors)
                self.assertEqual(len(names), len(ort), names)  # 2 layers x 7 + the classifier
                for matrix in names:
                    q, scales = kvx_integers(tensors, matrix, cols(matrix))
                    graph_blocks = -(-q.shape[1] // meta["block_size"])
                    self.assertTrue(np.all(scales[:, graph_blocks:] == 0), f"{matrix}: padding blocks' scales")
                    self.assertTrue(any(np.array_equal(q, oq) and np.array_equal(scales[:, :graph_blocks], os_)
                                        for oq, os_ in ort), f"{matrix}: no MatMulNBits node holds its integers")
                    self.assertEqual(f"{matrix}.zero_points" in tensors, not meta["is_symmetric"], matrix)

    def test_quantize_flag_gives_ort_quantizers_integers(self):
        """`--quantize` of the fp32 source graph equals ORT's MatMulNBitsQuantizer, tensor for tensor (the
        classifier too where kvx keeps ORT's bits for it: int8; under int4 kvx makes it int8)."""
        source = REPO / meta_source()
        for name in NBITS:
            with self.subTest(name):
                _, meta, _ = fixture(name)
                out = self.tmp / f"quantize-{name}"
                convert_in_process(source, out, max_seq_len=meta["context_length"],
                                   quantize=f"int{meta['bits']}", block_size=meta["block_size"],
                                   symmetric=meta["is_symmetric"])
                mine = load_file(str(out / "model.safetensors"))
                _, ort = self.load(name)
                compared = [f"{m}.{part}" for m in matrices_of(ort) if (f"{m}.q4" in mine) == (f"{m}.q4" in ort)
                            for part in ("q4", "q8", "scales", "zero_points") if f"{m}.{part}" in ort]
                self.assertGreaterEqual(len(compared), 2 * 7 * 2, compared)
                for key in compared:
                    self.assertEqual(mine[key].dtype, ort[key].dtype, key)
                    self.assertTrue(np.array_equal(mine[key], ort[key]), f"{key}: differs from ORT's quantizer")
                self.assertIn("tok_embeddings.q4" if meta["bits"] == 4 else "tok_embeddings.q8", mine)
                self.assertIn("classifier.q8", mine)

    def test_directories_compute_orts_logits(self):
        """numpy over the dequantized directory against ORT (accuracy_level 0) on the prompt."""
        for name in ALL:
            with self.subTest(name):
                folder, _, prompt = fixture(name)
                config, tensors = self.load(name)
                floats = kvx_quantized_reading.dequantized_tensors(tensors, kvx_quantized_reading.llama_cols(config))
                logits = numpy_llama.forward(config, floats, prompt)
                ort = np.load(folder / "ort_acc0.npy")
                error = relative(logits, ort)
                print(f"{name}: numpy over the directory vs ORT {error:.1e} of max|ORT|", file=sys.stderr)
                self.assertLessEqual(error, REFERENCE_TOLERANCE, name)

    def test_builder_ties_quantized_embedding(self):
        """The builder's int4 graph reads the embedding from lm_head's MatMulNBits weight (GatherBlockQuantized
        of a Reshape): one quantized tok_embeddings, tied, no classifier."""
        config, tensors = self.load("builder-int4-llama-tied")
        self.assertTrue(config["tied_embeddings"])
        self.assertIn("tok_embeddings.q4", tensors)
        self.assertFalse(any(k.startswith("classifier") for k in tensors))

    @unittest.skipIf(not KVX, "KVX_BIN not set")
    def test_engine_matches_ort(self):
        """--simd reference against ORT at accuracy_level 0; the default kernels, which round activations to int8
        per 32, against ORT's own error doing so (accuracy_level 4 vs 0), plus the reference tolerance for
        summation order. ORT's accuracy_level 4 rounds activations in blocks of the weights' block size: at 32
        both round the same numbers, so there the default kernels must also match ORT's accuracy_level 4 itself;
        at 16 ORT's finer blocks err less than kvx's 32 (ACTIVATION_BLOCKS_DIFFER), bounded more loosely."""
        for name in ALL:
            with self.subTest(name):
                folder, meta, prompt = fixture(name)
                ort, ort_acc4 = np.load(folder / "ort_acc0.npy"), np.load(folder / "ort_acc4.npy")
                reference = self.kvx_logits(name, prompt, "--simd", "reference")
                fast = self.kvx_logits(name, prompt)
                reference_error, fast_error, vs_acc4 = relative(reference, ort), relative(fast, ort), relative(fast, ort_acc4)
                allowed = acc4_tolerance(name)
                print(f"{name}: kvx reference {reference_error:.1e}, fast {fast_error:.1e} of max|ORT| at "
                      f"accuracy_level 0 (ORT acc4 vs acc0: {allowed:.1e}); fast vs ORT acc4 {vs_acc4:.1e}"
                      f"{' (the file says 4)' if file_accuracy_level(folder) == 4 else ''}", file=sys.stderr)
                self.assertLessEqual(reference_error, REFERENCE_TOLERANCE, f"{name}: --simd reference")
                if name in ROUNDS_UNLIKE_ORT:  # still so: when kvx rounds as MLAS does, drop the entry
                    self.assertGreater(vs_acc4, REFERENCE_TOLERANCE, f"{name}: now matches ORT acc4 (ROUNDS_UNLIKE_ORT)")
                elif meta.get("block_size", 32) == 32:
                    self.assertLessEqual(vs_acc4, REFERENCE_TOLERANCE, f"{name}: default kernels vs ORT acc4")
                factor = ACTIVATION_BLOCKS_DIFFER.get(meta.get("block_size"), 1.0)
                self.assertLessEqual(fast_error, factor * allowed + REFERENCE_TOLERANCE, f"{name}: default kernels")

    @unittest.skipIf(not KVX, "KVX_BIN not set")
    def test_engine_runs_quantize_output(self):
        """`--quantize int4`'s directory, embedding q4 and classifier q8 included: the engine's reference kernels
        against numpy over the same directory dequantized (the integers are checked against ORT above)."""
        _, meta, prompt = fixture(NBITS[0])
        name = "quantize-int4-default"
        out = self.converted[name] = self.tmp / name
        convert_in_process(REPO / meta_source(), out, max_seq_len=meta["context_length"], quantize="int4")
        config, tensors = self.load(name)
        self.assertIn("tok_embeddings.q4", tensors)
        self.assertIn("classifier.q8", tensors)
        expected = numpy_llama.forward(config, kvx_quantized_reading.dequantized_tensors(
            tensors, kvx_quantized_reading.llama_cols(config)), prompt)
        error = relative(self.kvx_logits(name, prompt, "--simd", "reference"), expected)
        print(f"{name}: kvx reference vs numpy over the directory {error:.1e}", file=sys.stderr)
        self.assertLessEqual(error, REFERENCE_TOLERANCE)

    def kvx_logits(self, name, prompt, *extra):
        npy = self.tmp / f"{name}-{len(extra)}.npy"
        run = subprocess.run([KVX, "logits", "-m", str(self.converted[name]), "-t", "1", "--tokens",
                              ",".join(map(str, prompt)), "--n-prefill", str(len(prompt) - 1), "-o", str(npy), *extra],
                             capture_output=True, text=True, check=False)
        stored_quantized = matrices_of(load_file(str(self.converted[name] / "model.safetensors")))
        if run.returncode != 0 and any(f"has no tensor '{m}'" in run.stderr for m in stored_quantized):
            # A loader from before quantized matrices looks for X only. Once it reads X.q4 / X.q8, any
            # failure fails the test.
            self.skipTest(f"this kvx cannot load quantized matrices yet: {run.stderr.strip()}")
        self.assertEqual(run.returncode, 0, run.stderr)
        return np.load(npy)


def matrices_of(tensors):
    return sorted({k.rsplit(".", 1)[0] for k in tensors if k.endswith((".q4", ".q8"))})


class BadQuantizedNodes(unittest.TestCase):
    """What kvx cannot store stops the converter with one line naming the node and the problem."""

    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory()
        cls.tmp = Path(cls._tmp.name)

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def refused(self, fixture_name, change, *fragments):
        model = onnx.load(FIXTURES / fixture_name / "model.onnx")
        change(model, next(n for n in model.graph.node if n.op_type in ("MatMulNBits", "DequantizeLinear")))
        path = self.tmp / f"{fragments[0][:12].replace(' ', '_')}.onnx"
        onnx.save(model, path)
        result = convert(path, self.tmp / "out", "--max-seq-len", "64")
        line = assert_one_line_failure(self, result, *fragments)
        print(line, file=sys.stderr)

    @staticmethod
    def set_attribute(node, name, value):
        for attribute in [a for a in node.attribute if a.name == name]:
            node.attribute.remove(attribute)
        node.attribute.append(helper.make_attribute(name, value))

    def test_three_bits(self):
        self.refused("nbits-4-b32-asym", lambda m, n: self.set_attribute(n, "bits", 3), "bits=3", "MatMulNBits")

    def test_g_idx(self):
        def add_g_idx(model, node):
            model.graph.initializer.append(numpy_helper.from_array(np.arange(64, dtype=np.int32) // 32, "g_idx"))
            node.input.append("g_idx")
        self.refused("nbits-4-b32-asym", add_g_idx, "g_idx")

    def test_block_size_not_a_power_of_two(self):
        self.refused("nbits-4-b32-asym", lambda m, n: self.set_attribute(n, "block_size", 24), "block_size 24",
                     "power of two")

    def test_wrong_scale_shape(self):
        def shrink_scales(model, node):
            model.graph.initializer.append(numpy_helper.from_array(np.ones((64, 3), np.float32), "bad_scales"))
            node.input[2] = "bad_scales"
        self.refused("nbits-4-b32-asym", shrink_scales, "scales has shape [64, 3], expected [64, 2]")

    def test_dequantize_linear_along_outputs(self):
        self.refused("qdq-4-b32-asym", lambda m, n: self.set_attribute(n, "axis", 1), "axis 1")


class Fp16Quantizer(unittest.TestCase):
    def test_fp16_weights_quantize_as_ort(self):
        """kvx's RTN on an fp16 weight (scales fp16, 1 / s from the rounded scale) against what ORT's quantizer
        made of it (rtn_fp16.npz, regenerate.py), in every configuration of the graph fixtures."""
        cases = np.load(FIXTURES / "rtn_fp16.npz")
        weight = cases["weight"]  # [K, N], ONNX MatMul layout
        k, n = weight.shape
        for name in NBITS:
            with self.subTest(name):
                bits, block, symmetric = int(name.split("-")[1]), int(name.split("-")[2][1:]), name.endswith("-sym")
                mine = quantize_rtn(np.ascontiguousarray(weight.T), bits, block, symmetric)
                blocks = -(-k // block)
                packed = cases[f"{name}.packed"]
                q = (np.stack([packed & 15, packed >> 4], axis=-1) if bits == 4 else packed).reshape(n, -1)[:, :k]
                shift = 128 if bits == 8 else 0
                self.assertTrue(np.array_equal(mine.q[:, :k].astype(np.int16) + shift, q.astype(np.int16)))
                self.assertEqual(mine.scales.dtype, np.float16)
                self.assertTrue(np.array_equal(mine.scales[:, :blocks], cases[f"{name}.scales"].reshape(n, -1)))
                if not symmetric:
                    zp = cases[f"{name}.zero_points"]
                    zp = (np.stack([zp & 15, zp >> 4], axis=-1) if bits == 4 else zp).reshape(n, -1)[:, :blocks]
                    self.assertTrue(np.array_equal(mine.zero_points[:, :blocks].astype(np.int16) + shift,
                                                   zp.astype(np.int16)))


class PackingUnits(unittest.TestCase):
    """The layout rules on small hand-made matrices."""

    def test_nibble_order_padding_and_zero_scale_block(self):
        q = np.arange(48, dtype=np.int16).reshape(1, 3, 16) % 16  # cols 48, B 16: 3 blocks, L = 64, one more
        scales = np.array([[1.0, 2.0, 3.0]], np.float32)
        matrix = from_unsigned_blocks(4, 16, 48, q, scales)
        tensors = matrix.to_tensors("w")
        self.assertEqual(tensors["w.q4"].shape, (1, 32))
        self.assertEqual(tensors["w.scales"].tolist(), [[1.0, 2.0, 3.0, 0.0]])
        packed = tensors["w.q4"][0]
        self.assertEqual(packed[0], (q.reshape(-1)[0]) | (q.reshape(-1)[16] << 4))  # elements 0 and 16
        self.assertEqual(packed[16], q.reshape(-1)[32])  # element 32 low, padding element 48 (0) high
        self.assertTrue(np.array_equal(kvx_quantized_reading.dequantize(tensors, "w", 48),
                                       (q.reshape(1, -1) - 8) * np.repeat(scales, 16, axis=1)))

    def test_eight_bit_shift_and_float_zero_points(self):
        q = np.array([[[0, 128, 255, 7] * 8]], np.int16)  # one block of 32
        scales = np.array([[0.5]], np.float32)
        ints = from_unsigned_blocks(8, 32, 32, q, scales, zero_points=np.array([[130]], np.int16)).to_tensors("w")
        self.assertEqual(ints["w.q8"][0, :4].tolist(), [-128, 0, 127, -121])
        self.assertEqual(ints["w.zero_points"].tolist(), [[2]])
        floats = from_unsigned_blocks(4, 32, 32, q % 16, scales, float_zero_points=np.array([[7.5]], np.float32))
        tensors = floats.to_tensors("w")
        self.assertEqual(tensors["w.mins"].tolist(), [[-3.75]])
        self.assertTrue(np.allclose(kvx_quantized_reading.dequantize(tensors, "w", 32),
                                    0.5 * (q.reshape(1, -1) % 16 - 7.5)))

    def test_quantize_choice_follows_llama_cpp(self):
        self.assertEqual(bits_for("layers.0.wq", "int4", False, True), 4)
        self.assertEqual(bits_for("tok_embeddings", "int4", False, True), 4)
        self.assertEqual(bits_for("classifier", "int4", False, True), 8)
        self.assertEqual(bits_for("tok_embeddings", "int4", True, True), 8)  # tied: it is the classifier
        self.assertEqual(bits_for("tok_embeddings", "int8", True, True), 8)
        self.assertIsNone(bits_for("classifier", "int4", False, False))
        self.assertIsNone(bits_for("pos_embeddings", "int8", False, True))

    def test_cli_flags(self):
        with tempfile.TemporaryDirectory() as tmp:
            result = convert(REPO / meta_source(), Path(tmp) / "out", "--max-seq-len", "64", "--quantize", "int4",
                             "--block-size", "64", "--symmetric", "--no-quantize-embeddings")
            self.assertEqual(result.returncode, 0, result.stderr)
            tensors = load_file(str(Path(tmp) / "out" / "model.safetensors"))
            self.assertEqual(tensors["layers.0.wq.scales"].shape, (64, 1))
            self.assertNotIn("layers.0.wq.zero_points", tensors)
            self.assertIn("tok_embeddings", tensors)
            self.assertIn("classifier", tensors)


def meta_source():
    return json.loads((FIXTURES / NBITS[0] / "fixture.json").read_text())["source"] + "/model.onnx"


if __name__ == "__main__":
    started = time.monotonic()
    result = unittest.main(exit=False).result
    print(f"[{time.monotonic() - started:.1f}s]", file=sys.stderr)
    sys.exit(not result.wasSuccessful())
