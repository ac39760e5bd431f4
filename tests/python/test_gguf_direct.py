#!/usr/bin/env python3
"""kvx's own GGUF reader (engine/files/gguf_file.*) and its block types (engine/model/gguf_matrix.*) against
the `gguf` package's writer and dequantization, an implementation kvx shares nothing with:

  - every tensor type kvx keeps, random blocks (finite fp16 scales, every other bit random): `kvx inspect
    --tensor` (kvx's layout, dequantized by the reference dequantization) equals gguf's dequantize() bit
    for bit, row permutations and all;
  - every metadata value type, arrays of arrays included, and the tensor table, as kvx lists them against
    what gguf's writer was given;
  - hostile files: every truncation of a small model, and each count, length, offset, type and name made
    wrong in turn: a one-line error naming the file, exit 1, no crash, nothing read outside the file;
  - models kvx refuses (an unknown architecture, a type it does not keep, a missing or foreign tensor, a
    wrong shape), each with a line that names the problem.

The real files (Gemma 3 and SmolLM2 as downloaded) are run in test_gemma3.py and test_smollm2_gguf.py."""

import os
import re
import struct
import subprocess
import tempfile
import unittest
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES

KVX = os.environ.get("KVX_BIN", "kvx")

# The fp16 fields of each block type (byte ranges in a block), which must hold finite values for a
# dequantization to compare; every other byte of a block is random.
HALF_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0], T.IQ4_NL: [0],
    T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208], T.Q3_K: [108], T.Q2_K: [80, 82], T.IQ4_XS: [0],
}


def random_blocks(kind, rows, cols, rng):
    """[rows, bytes per row] uint8 of `kind` blocks with random bits and finite scales."""
    block, size = GGML_QUANT_SIZES[kind]
    data = rng.integers(0, 256, (rows, cols // block, size), dtype=np.uint8)
    for offset in HALF_FIELDS[kind]:
        halves = rng.uniform(-0.05, 0.05, (rows, cols // block)).astype(np.float16)
        data[:, :, offset:offset + 2] = halves.view(np.uint8).reshape(rows, cols // block, 2)
    return data.reshape(rows, -1)


def run_kvx(*args):
    return subprocess.run([KVX, *map(str, args)], capture_output=True, text=True, timeout=120)


class Folder(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self._tmp.name)

    def tearDown(self):
        self._tmp.cleanup()

    def assertRefused(self, proc, *fragments):
        """exit 1 (not a signal), one line on stderr starting 'kvx: ', naming each fragment."""
        self.assertEqual(proc.returncode, 1, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, proc.stderr)
        self.assertTrue(lines[0].startswith("kvx: "), lines[0])
        for fragment in fragments:
            self.assertIn(fragment, lines[0])


def write_tensors(path, tensors):
    """A GGUF of `tensors` ({name: (array, raw_dtype or None)}) and no other metadata than its architecture."""
    writer = gguf.GGUFWriter(str(path), "llama")
    for name, (data, raw_dtype) in tensors.items():
        writer.add_tensor(name, data, raw_dtype=raw_dtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


class BlockTypes(Folder):
    def assert_dequantized(self, path, expected, *flags):
        """`kvx inspect --tensor NAME [flags]` gives each tensor of `expected` ({name: fp32 values}) bit for bit."""
        for name, want in expected.items():
            with self.subTest(type=name, flags=flags):
                out = self.dir / f"{name}.npy"
                proc = run_kvx("inspect", path, "--tensor", name, *flags, "-o", out)
                self.assertEqual(proc.returncode, 0, proc.stderr)
                got = np.load(out)
                self.assertEqual(got.shape, want.shape)
                np.testing.assert_array_equal(got.view(np.uint32), want.astype(np.float32).view(np.uint32))

    def test_every_kept_type_dequantizes_as_gguf_does(self):
        rng = np.random.default_rng(7)
        rows = 5
        tensors, expected = {}, {}
        for kind in HALF_FIELDS:
            cols = 512 if GGML_QUANT_SIZES[kind][0] == 256 else 96
            tensors[kind.name] = (random_blocks(kind, rows, cols, rng), kind)
            expected[kind.name] = gguf.quants.dequantize(tensors[kind.name][0], kind).reshape(rows, cols)
        floats = rng.standard_normal((rows, 40)).astype(np.float32)
        tensors["F32"] = (floats, None)
        tensors["F16"] = (floats.astype(np.float16), None)
        expected["F32"] = floats
        expected["F16"] = floats.astype(np.float16).astype(np.float32)
        bf16 = gguf.quants.quantize(floats, T.BF16)
        tensors["BF16"] = (bf16, T.BF16)
        expected["BF16"] = gguf.quants.dequantize(bf16, T.BF16).reshape(rows, 40)
        self.assert_dequantized(write_tensors(self.dir / "types.gguf", tensors), expected)

    def test_row_groups_hold_every_weight_of_a_tensor_converted_in_slabs(self):
        """The SIMD levels' load (--row-groups) goes through a rows-layout scratch of about 1 MiB at a time
        (gguf_matrix.cpp): a tensor of 2,501 rows spans several such slabs and ends in a partial row group,
        and every weight must still be gguf's."""
        rng = np.random.default_rng(11)
        rows = 2501
        tensors, expected = {}, {}
        for kind in (T.Q8_0, T.Q4_0, T.Q4_1, T.Q4_K, T.Q6_K, T.Q3_K):  # Q6_K and Q3_K in 6 bits
            cols = 1024 if kind in (T.Q8_0, T.Q4_0, T.Q4_1) else 512
            tensors[kind.name] = (random_blocks(kind, rows, cols, rng), kind)
            expected[kind.name] = gguf.quants.dequantize(tensors[kind.name][0], kind).reshape(rows, cols)
        self.assert_dequantized(write_tensors(self.dir / "slabs.gguf", tensors), expected, "--row-groups")

    def test_a_type_kvx_does_not_keep_is_named(self):
        path = self.dir / "iq2.gguf"
        writer = gguf.GGUFWriter(str(path), "llama")
        writer.add_tensor("w", np.zeros((2, 66), np.uint8), raw_dtype=T.IQ2_XXS)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        self.assertRefused(run_kvx("inspect", path, "--tensor", "w", "-o", self.dir / "w.npy"), "IQ2_XXS", "Q4_K")


class Metadata(Folder):
    def test_every_value_type_and_the_tensor_table(self):
        path = self.dir / "meta.gguf"
        V = gguf.GGUFValueType
        writer = gguf.GGUFWriter(str(path), "llama")
        values = [("u8", 200, V.UINT8), ("i8", -100, V.INT8), ("u16", 60000, V.UINT16), ("i16", -30000, V.INT16),
                  ("u32", 4000000000, V.UINT32), ("i32", -2000000000, V.INT32), ("u64", 2 ** 63 + 5, V.UINT64),
                  ("i64", -2 ** 62, V.INT64), ("bool", True, V.BOOL)]
        for key, value, vtype in values:
            writer.add_key_value("test." + key, value, vtype)
        writer.add_key_value("test.f32", 0.5, V.FLOAT32)
        writer.add_key_value("test.f64", -1.25, V.FLOAT64)
        writer.add_key_value("test.string", "naïve\ttext", V.STRING)
        writer.add_key_value("test.strings", ["a", "", "ü"], V.ARRAY, sub_type=V.STRING)
        writer.add_key_value("test.nested", [[1, 2], [3]], V.ARRAY)
        writer.add_tensor("a.weight", np.ones((3, 4), np.float32))
        writer.add_tensor("b.weight", np.ones((2, 64), np.float16))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        proc = run_kvx("inspect", path)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        lines = proc.stdout.splitlines()
        for key, value, vtype in values:
            text = {True: "true"}.get(value, str(value)) if vtype == V.BOOL else str(value)
            self.assertIn(f"  test.{key}: {key} = {text}", lines)
        self.assertIn("  test.f32: f32 = 0.500000", lines)
        self.assertIn("  test.f64: f64 = -1.250000", lines)
        self.assertIn('  test.string: string = "naïve text"', lines)
        self.assertIn("  test.strings: array = [string x 3]", lines)
        self.assertIn("  test.nested: array = [array x 2]", lines)
        self.assertIn("  tensor a.weight F32 [4, 3] 48 bytes", lines)
        self.assertIn("  tensor b.weight F16 [64, 2] 256 bytes", lines)


def tiny_llama(path, kind=T.Q8_0, arch="llama", extra=None, skip=(), shapes=None, mlp=64):
    """A 1-layer llama-shaped GGUF (dim 32, 2 heads of 16, MLP `mlp`, vocabulary 8) with matrices of `kind`."""
    rng = np.random.default_rng(3)
    writer = gguf.GGUFWriter(str(path), arch)
    a = arch
    writer.add_uint32(f"{a}.embedding_length", 32)
    writer.add_uint32(f"{a}.feed_forward_length", mlp)
    writer.add_uint32(f"{a}.block_count", 1)
    writer.add_uint32(f"{a}.attention.head_count", 2)
    writer.add_uint32(f"{a}.attention.head_count_kv", 2)
    writer.add_uint32(f"{a}.context_length", 64)
    writer.add_float32(f"{a}.attention.layer_norm_rms_epsilon", 1e-5)
    tensors = {"token_embd.weight": (8, 32), "output_norm.weight": (32,), "blk.0.attn_norm.weight": (32,),
               "blk.0.attn_q.weight": (32, 32), "blk.0.attn_k.weight": (32, 32), "blk.0.attn_v.weight": (32, 32),
               "blk.0.attn_output.weight": (32, 32), "blk.0.ffn_norm.weight": (32,),
               "blk.0.ffn_gate.weight": (mlp, 32), "blk.0.ffn_up.weight": (mlp, 32), "blk.0.ffn_down.weight": (32, mlp)}
    tensors.update(shapes or {})
    tensors.update(extra or {})
    for name, shape in tensors.items():
        if name in skip:
            continue
        values = rng.standard_normal(shape).astype(np.float32) * 0.2
        if len(shape) == 2 and kind != T.F32:
            writer.add_tensor(name, gguf.quants.quantize(values, kind), raw_dtype=kind)
        else:
            writer.add_tensor(name, values)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def smooth_k_blocks(kind, rows, cols, rng):
    """[rows, bytes per row] of Q4_K or Q6_K blocks: random integers, with scales that centre the weights and
    size them as a trained model's (|w| up to about 0.1), so that no outlier dominates the logits (gguf has no
    K-quant quantizer)."""
    supers = cols // 256
    data = random_blocks(kind, rows, cols, rng).reshape(rows, supers, -1)
    if kind == T.Q4_K:
        d = rng.uniform(0.5e-3, 1e-3, (rows, supers)).astype(np.float16)
        data[:, :, 0:2] = d.view(np.uint8).reshape(rows, supers, 2)
        data[:, :, 2:4] = (d.astype(np.float32) * 15).astype(np.float16).view(np.uint8).reshape(rows, supers, 2)
        # Scales 8..15 and minimums half of them, all below 16: bytes 4-7 of the block hold the first four
        # scales, 8-11 their minimums, 12-15 the last four's scale (low nibble) and minimum (high nibble). Then
        # d sc q - dmin m = d sc (q - 7.5).
        sc = rng.integers(8, 16, (rows, supers, 8))
        m = sc // 2
        data[:, :, 4:8] = sc[:, :, :4]
        data[:, :, 8:12] = m[:, :, :4]
        data[:, :, 12:16] = sc[:, :, 4:] | (m[:, :, 4:] << 4)
    else:  # Q6_K: d sc (q - 32), q already centred
        data[:, :, 192:208] = rng.integers(-64, 64, (rows, supers, 16)).astype(np.int8).view(np.uint8)
        d = rng.uniform(0.5e-4, 1e-4, (rows, supers)).astype(np.float16)
        data[:, :, 208:210] = d.view(np.uint8).reshape(rows, supers, 2)
    return data.reshape(rows, -1)


def k_quant_llama(path, dim, heads, mlp, vocab=256):
    """A 1-layer llama-shaped GGUF as a Q4_K_M file mixes its types: Q4_K matrices, Q6_K attn_v and embedding
    (tied: the classifier too)."""
    rng = np.random.default_rng(5)
    writer = gguf.GGUFWriter(str(path), "llama")
    for key, value in {"embedding_length": dim, "feed_forward_length": mlp, "block_count": 1,
                       "attention.head_count": heads, "attention.head_count_kv": heads, "context_length": 64}.items():
        writer.add_uint32(f"llama.{key}", value)
    writer.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    matrices = {"token_embd.weight": ((vocab, dim), T.Q6_K), "blk.0.attn_q.weight": ((dim, dim), T.Q4_K),
                "blk.0.attn_k.weight": ((dim, dim), T.Q4_K), "blk.0.attn_v.weight": ((dim, dim), T.Q6_K),
                "blk.0.attn_output.weight": ((dim, dim), T.Q4_K), "blk.0.ffn_gate.weight": ((mlp, dim), T.Q4_K),
                "blk.0.ffn_up.weight": ((mlp, dim), T.Q4_K), "blk.0.ffn_down.weight": ((dim, mlp), T.Q4_K)}
    for name in ("output_norm.weight", "blk.0.attn_norm.weight", "blk.0.ffn_norm.weight"):
        writer.add_tensor(name, (1 + 0.1 * rng.standard_normal(dim)).astype(np.float32))
    for name, (shape, kind) in matrices.items():
        writer.add_tensor(name, smooth_k_blocks(kind, *shape, rng), raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


class Models(Folder):
    def logits(self, path):
        out = self.dir / "logits.npy"
        proc = run_kvx("logits", "-m", path, "--tokens", "1,2,3", "-o", out, "--simd", "reference")
        return proc, out

    def test_a_tiny_model_runs(self):
        proc, out = self.logits(tiny_llama(self.dir / "ok.gguf"))
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(np.load(out).shape, (3, 8))

    def test_block_matrices_loaded_into_row_groups_give_the_reference_logits(self):
        """The SIMD levels load Q8_0, Q4_0 and Q4_1 straight into row groups (gguf_matrix.h); the reference
        reads them in rows. Their logits differ only by the int8 rounding of the activations."""
        for kind in (T.Q8_0, T.Q4_0, T.Q4_1):
            with self.subTest(type=kind.name):
                path = tiny_llama(self.dir / f"{kind.name}.gguf", kind=kind)
                want_out, got_out = self.dir / "want.npy", self.dir / "got.npy"
                proc = run_kvx("logits", "-m", path, "--tokens", "1,2,3,4,5", "-o", want_out, "--simd", "reference")
                self.assertEqual(proc.returncode, 0, proc.stderr)
                proc = run_kvx("logits", "-m", path, "--tokens", "1,2,3,4,5", "-o", got_out)
                self.assertEqual(proc.returncode, 0, proc.stderr)
                want, got = np.load(want_out), np.load(got_out)
                self.assertGreater(np.abs(want).max(), 0.1)
                np.testing.assert_allclose(got, want, atol=0.02 * np.abs(want).max())

    def test_float_matrices_are_held_once(self):
        """The CPU backend copies F32 and F16 matrices into huge pages a piece of 8 MiB at a time and gives the
        file's pages of each piece back (cpu/backend/weight_copies.h), and reads no vector in place (a norm
        between two matrices kept the page-cache folio around it mapped): a run's peak RSS is the file's size
        plus the runtime's, not twice the file (an F32 SmolLM2: 1055 MiB for a 515 MiB file before, 560
        after). The copies, several pieces each, give the logits of the reference kernels, which read the
        file's matrices in place."""
        for kind in (T.F32, T.F16):
            with self.subTest(type=kind.name):
                path = tiny_llama(self.dir / f"wide_{kind.name}.gguf", kind=kind, mlp=1 << 18)  # 3 x 32 MiB of F32
                self.assert_held_once(path, 1.25, 32 << 20, 1e-4, "1,2,3")

    def assert_held_once(self, path, factor, slack, tolerance, tokens):
        """`kvx logits` of `tokens` on the model file: its peak RSS under factor x the file's size + slack bytes,
        and its logits within tolerance x max|logit| of the reference kernels'."""
        size = path.stat().st_size
        got, want = self.dir / "held.npy", self.dir / "held_reference.npy"
        proc = run_kvx("logits", "-m", path, "--tokens", tokens, "-o", got)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        peak = float(re.search(r"^kvx: peak RSS ([0-9.]+) MiB$", proc.stderr, re.M).group(1)) * (1 << 20)
        self.assertLess(peak, size * factor + slack, f"peak RSS {peak / (1 << 20):.0f} MiB for a {size >> 20} MiB file")
        proc = run_kvx("logits", "-m", path, "--tokens", tokens, "-o", want, "--simd", "reference")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        want = np.load(want)
        self.assertGreater(np.abs(want).max(), 0.1)
        np.testing.assert_allclose(np.load(got), want, rtol=0, atol=tolerance * np.abs(want).max())

    def test_k_quant_matrices_are_held_at_about_the_files_size(self):
        """The K-quants keep their scales as the file does (an int8 multiplier per block of the super-block's
        fp16 d and -dmin, gguf_matrix.h): Q4_K is 18.5 bytes per 32 against the file's 18, not 24 as with fp32
        scales and minimums, and the load gives each slab's file pages back as it converts it, so the last
        matrix is not held twice. The run's peak RSS is the file's size plus the runtime's (115 MiB for this
        94 MiB file; 158 with fp32 scales and the pages given back per matrix). Its logits, on row groups, are
        the reference kernels' on the rows layout within the int8 rounding of the activations (measured
        2.7% of max|logit| at this width, 4096)."""
        path = k_quant_llama(self.dir / "k_quants.gguf", dim=4096, heads=32, mlp=8192)
        self.assert_held_once(path, 1.1, 16 << 20, 0.04, "1,2,3,4,5")

    def test_refusals_name_the_problem(self):
        cases = [
            (dict(arch="bert"), ["architecture 'bert'", "llama"]),
            (dict(kind=T.Q8_0, skip=("blk.0.ffn_up.weight",)), ["'blk.0.ffn_up.weight' is missing"]),
            (dict(extra={"blk.0.foreign.weight": (4,)}), ["'blk.0.foreign.weight'", "not one"]),
            (dict(shapes={"blk.0.attn_k.weight": (64, 32)}), ["'blk.0.attn_k.weight'", "dims"]),
        ]
        for i, (kwargs, fragments) in enumerate(cases):
            with self.subTest(case=fragments[0]):
                proc, _ = self.logits(tiny_llama(self.dir / f"bad{i}.gguf", **kwargs))
                self.assertRefused(proc, "GGUF file", *fragments)


def header_parts(path):
    """(bytes, offsets of interest) of a small GGUF: where the counts, the first key's length and the first
    tensor's info sit, found by walking the file as the format says."""
    data = bytearray(Path(path).read_bytes())
    n_tensors, n_keys = struct.unpack_from("<QQ", data, 8)
    pos = 24
    first_key_len = pos
    for _ in range(n_keys):
        (n,) = struct.unpack_from("<Q", data, pos)
        pos += 8 + n
        (vtype,) = struct.unpack_from("<I", data, pos)
        pos += 4
        pos = skip_value(data, pos, vtype)
    tensor_info = pos
    return data, {"n_tensors": 8, "n_keys": 16, "key_len": first_key_len, "tensor_info": tensor_info}


SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def skip_value(data, pos, vtype):
    if vtype in SCALAR:
        return pos + SCALAR[vtype]
    if vtype == 8:
        (n,) = struct.unpack_from("<Q", data, pos)
        return pos + 8 + n
    item, count = struct.unpack_from("<IQ", data, pos)
    pos += 12
    for _ in range(count):
        pos = skip_value(data, pos, item)
    return pos


class HostileFiles(Folder):
    def setUp(self):
        super().setUp()
        self.good = tiny_llama(self.dir / "good.gguf")

    def inspect(self, data, name="bad.gguf"):
        path = self.dir / name
        path.write_bytes(bytes(data))
        return run_kvx("inspect", path)

    def test_every_truncation_is_refused(self):
        data = self.good.read_bytes()
        self.assertEqual(run_kvx("inspect", self.good).returncode, 0)
        cuts = sorted(set(list(range(0, 64)) + list(range(64, len(data), max(1, len(data) // 97)))))
        for cut in cuts:
            with self.subTest(cut=cut):
                self.assertRefused(self.inspect(data[:cut]), "GGUF file")

    def test_each_field_made_wrong(self):
        data, at = header_parts(self.good)
        t = at["tensor_info"]
        (name_len,) = struct.unpack_from("<Q", data, t)
        dims_at = t + 8 + name_len + 4  # after the name and the rank
        (rank,) = struct.unpack_from("<I", data, t + 8 + name_len)
        type_at = dims_at + 8 * rank
        offset_at = type_at + 4

        def patched(pos, fmt, value):
            out = bytearray(data)
            struct.pack_into(fmt, out, pos, value)
            return out

        cases = [
            (b"GGUX" + bytes(data[4:]), "no GGUF magic"),
            (patched(4, "<I", 4), "version 4"),
            (patched(4, "<I", 1), "version 1"),
            (patched(4, "<I", 0x03000000), "big-endian"),
            (patched(at["n_tensors"], "<Q", 1 << 60), "tensors"),
            (patched(at["n_keys"], "<Q", 1 << 60), "metadata keys"),
            (patched(at["key_len"], "<Q", 1 << 62), "bytes"),
            (patched(t + 8 + name_len, "<I", 5), "dims"),
            (patched(dims_at, "<Q", 0), "dim of 0"),
            (patched(dims_at, "<Q", 1 << 50), "2^44"),
            (patched(type_at, "<I", 99), "unknown ggml type 99"),
            (patched(offset_at, "<Q", 3), "alignment"),
            (patched(offset_at, "<Q", 1 << 40), "past the end"),
        ]
        for i, (bad, fragment) in enumerate(cases):
            with self.subTest(fragment=fragment):
                self.assertRefused(self.inspect(bad, f"bad{i}.gguf"), "GGUF file", fragment)

    def test_a_directory_and_an_empty_file(self):
        self.assertRefused(self.inspect(b"", "empty.gguf"), "GGUF file")
        (self.dir / "d.gguf").mkdir()
        self.assertRefused(run_kvx("inspect", self.dir / "d.gguf"))


if __name__ == "__main__":
    unittest.main()
