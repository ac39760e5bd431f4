"""The end-to-end benchmark's own arithmetic and files (kvx_tools.bench), on tiny inputs made here:
write_gguf.py's F32/F16 rewrite of a quantized GGUF, speed_of_light.py's bytes per decoded token, the
paths a result file records (kvx_tools.checkout.recorded_path), and how gguf_speed drives ik_llama.cpp."""
import json
import os
import stat
import subprocess
import sys
import tempfile
import unittest
import unittest.mock
from pathlib import Path

import gguf
import numpy as np
from gguf.quants import dequantize, quantize
from safetensors.numpy import save_file

from kvx_tools.bench import gguf_speed, kernel_summary, size_sweep, speed_of_light
from kvx_tools.bench.e2e_engines import IkLlamaCpp
from kvx_tools.checkout import REPO, recorded_path


def write_q8_gguf(path, matrix, norm):
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_uint32("llama.block_count", 1)
    writer.add_float32("llama.rope.freq_base", 100000.0)
    writer.add_token_list(["<a>", "b", "c"])
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    writer.add_tensor("blk.0.attn_q.weight", quantize(matrix, gguf.GGMLQuantizationType.Q8_0),
                      raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.add_tensor("blk.0.attn_norm.weight", norm)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


class WriteGgufTest(unittest.TestCase):
    def test_matrices_take_the_dtype_norms_stay_f32_metadata_is_kept(self):
        rng = np.random.default_rng(0)
        matrix = rng.standard_normal((4, 64)).astype(np.float32)  # [rows, cols]; Q8_0 blocks of 32 per row
        norm = rng.standard_normal(64).astype(np.float32)
        with tempfile.TemporaryDirectory() as tmp:
            source = Path(tmp) / "q8.gguf"
            write_q8_gguf(source, matrix, norm)
            expected = dequantize(quantize(matrix, gguf.GGMLQuantizationType.Q8_0), gguf.GGMLQuantizationType.Q8_0)
            for dtype, ggml_type, numpy_type, file_type in (
                    ("f16", gguf.GGMLQuantizationType.F16, np.float16, gguf.LlamaFileType.MOSTLY_F16),
                    ("f32", gguf.GGMLQuantizationType.F32, np.float32, gguf.LlamaFileType.ALL_F32)):
                with self.subTest(dtype=dtype):
                    out = Path(tmp) / f"{dtype}.gguf"
                    subprocess.run([sys.executable, "-m", "kvx_tools.bench.write_gguf", str(source), "--dtype", dtype,
                                    "-o", str(out)], check=True)
                    reader = gguf.GGUFReader(str(out))
                    tensors = {t.name: t for t in reader.tensors}
                    q = tensors["blk.0.attn_q.weight"]
                    self.assertEqual(q.tensor_type, ggml_type)
                    np.testing.assert_array_equal(np.asarray(q.data).reshape(4, 64), expected.astype(numpy_type))
                    self.assertEqual(tensors["blk.0.attn_norm.weight"].tensor_type, gguf.GGMLQuantizationType.F32)
                    np.testing.assert_array_equal(np.asarray(tensors["blk.0.attn_norm.weight"].data), norm)
                    fields = reader.fields
                    self.assertEqual(fields["general.file_type"].contents(), file_type)
                    self.assertEqual(fields["general.architecture"].contents(), "llama")
                    self.assertEqual(fields["llama.block_count"].contents(), 1)
                    self.assertEqual(fields["llama.rope.freq_base"].contents(), 100000.0)
                    self.assertEqual(fields["tokenizer.ggml.tokens"].contents(), ["<a>", "b", "c"])

    def test_unreadable_source_is_a_one_line_error(self):
        proc = subprocess.run([sys.executable, "-m", "kvx_tools.bench.write_gguf", "/nonexistent.gguf", "--dtype",
                               "f16", "-o", "/tmp/never.gguf"], capture_output=True, text=True)
        self.assertNotEqual(proc.returncode, 0)
        self.assertEqual(len(proc.stderr.strip().splitlines()), 1, proc.stderr)
        self.assertIn("/nonexistent.gguf", proc.stderr)


def write_model_dir(directory, tied, dtype=np.float32):
    """A 2-layer kvx-style model directory: dim 8, hidden 16, 2 heads of 4, 1 KV head, vocab 10."""
    dim, hidden, kv, vocab = 8, 16, 4, 10
    tensors = {"tok_embeddings": np.zeros((vocab, dim), dtype), "final_norm": np.zeros(dim, np.float32),
               "rope_inv_freq": np.zeros(2, np.float32)}
    for i in range(2):
        tensors.update({f"layers.{i}.attn_norm": np.zeros(dim, np.float32),
                        f"layers.{i}.ffn_norm": np.zeros(dim, np.float32),
                        f"layers.{i}.wq": np.zeros((dim, dim), dtype), f"layers.{i}.wo": np.zeros((dim, dim), dtype),
                        f"layers.{i}.wk": np.zeros((kv, dim), dtype), f"layers.{i}.wv": np.zeros((kv, dim), dtype),
                        f"layers.{i}.w_gate": np.zeros((hidden, dim), dtype),
                        f"layers.{i}.w_up": np.zeros((hidden, dim), dtype),
                        f"layers.{i}.w_down": np.zeros((dim, hidden), dtype)})
    if not tied:
        tensors["classifier"] = np.zeros((vocab, dim), dtype)
    save_file(tensors, str(Path(directory) / "model.safetensors"))
    config = {"n_layers": 2, "n_kv_heads": 1, "head_dim": 4, "tied_embeddings": tied,
              "weights": {"file": "model.safetensors"}}
    (Path(directory) / "config.json").write_text(json.dumps(config))


class RecordedPathTest(unittest.TestCase):
    def test_checkout_paths_become_relative_other_absolute_paths_their_name(self):
        self.assertEqual(recorded_path(REPO / "build" / "bin" / "kvx"), "build/bin/kvx")
        self.assertEqual(recorded_path(f"{REPO}/.cache/models/m/fixture/model"), ".cache/models/m/fixture/model")
        self.assertEqual(recorded_path("/opt/venvs/llama/bin/python"), "python")
        for kept in ("generate", "-m", "128", "relative/model", "<first 128 ids of bench/prompts/x.txt>"):
            self.assertEqual(recorded_path(kept), kept)


class KernelSummaryTest(unittest.TestCase):
    @staticmethod
    def run_of(name, gbps):
        return {"run_name": name, "GB/s": gbps, "real_time": 1.0, "time_unit": "us"}

    def test_a_gemv_above_the_read_loops_raises_the_ceiling_and_nothing_else_does(self):
        context = {"kvx_read_GBps_threads_1": "30.0", "kvx_read_GBps_threads_2": "37.0"}
        runs = [self.run_of("gemv/f32/threads:1/k:576/m:49152/real_time", 25.0),
                self.run_of("gemv/f32/threads:2/k:576/m:49152/real_time", 55.5),
                self.run_of("gemv/q4/threads:2/n:1/k:576/m:1536/real_time", 50.0),
                self.run_of("add/threads:1/rows:1/width:576/real_time", 200.0)]  # from L1: not a DRAM read
        ceilings = kernel_summary.read_ceilings(context, runs)
        self.assertEqual(ceilings, {1: 30.0, 2: 55.5})


class SpeedOfLightTest(unittest.TestCase):
    # per layer: wq, wo 8x8; wk, wv 4x8; gate, up 16x8; down 8x16 = 576 elements; two norms of 8
    MATRIX_ELEMENTS, NORM_ELEMENTS = 2 * 576, 2 * 16 + 8

    def test_tied_classifier_is_the_embedding_read_whole_plus_one_row(self):
        with tempfile.TemporaryDirectory() as tmp:
            write_model_dir(tmp, tied=True)
            expected = 4 * (self.MATRIX_ELEMENTS + self.NORM_ELEMENTS + 10 * 8 + 8)
            self.assertEqual(speed_of_light.weight_bytes_per_token(tmp), expected)

    def test_untied_embedding_reads_one_row_and_f16_halves_the_matrices(self):
        with tempfile.TemporaryDirectory() as tmp:
            write_model_dir(tmp, tied=False, dtype=np.float16)
            expected = 2 * (self.MATRIX_ELEMENTS + 10 * 8 + 8) + 4 * self.NORM_ELEMENTS
            self.assertEqual(speed_of_light.weight_bytes_per_token(tmp), expected)

    def test_kv_bytes_at_the_mean_context_of_the_decode(self):
        with tempfile.TemporaryDirectory() as tmp:
            write_model_dir(tmp, tied=True)
            per_position = 2 * 2 * 1 * 4 * 4  # layers x (K, V) x kv heads x head_dim x fp32
            self.assertEqual(speed_of_light.kv_bytes_per_position(tmp), per_position)
            self.assertEqual(speed_of_light.bytes_per_decoded_token(tmp, 100, 50) -
                             speed_of_light.weight_bytes_per_token(tmp), per_position * 125)

    def test_read_bandwidth_lines_are_parsed(self):
        with tempfile.TemporaryDirectory() as tmp:
            fake = Path(tmp) / "kvx_read_bandwidth"
            fake.write_text("#!/bin/sh\necho 'read loop avx2, 1 thread: best 14.7 GB/s (median 14.1, min 13.0)'\n"
                            "echo 'read bandwidth, 1 thread: best 14.7 GB/s (loop avx2)'\n"
                            "echo 'read loop avx2, 2 threads: best 25.2 GB/s (median 24.0, min 23.5)'\n"
                            "echo 'read bandwidth, 2 threads: best 25.2 GB/s (loop avx2)'\n")
            fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
            self.assertEqual(speed_of_light.measure_read_bandwidth(fake), {1: 14.7, 2: 25.2})
            self.assertEqual(speed_of_light.measure_read_ceiling(fake)["loops"], {1: {"avx2": 14.7}, 2: {"avx2": 25.2}})
            self.assertAlmostEqual(speed_of_light.ceiling_tokens_per_s(25.2, 538e6), 46.84, places=2)


class SizeSweepTest(unittest.TestCase):
    DIM, HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, VOCAB = 64, 128, 2, 4, 2, 16, 320

    def write(self, tmp, untied):
        path = Path(tmp) / ("untied.gguf" if untied else "tied.gguf")
        subprocess.run([sys.executable, "-m", "kvx_tools.bench.write_random_gguf", "-o", str(path), "--type", "q8_0",
                        "--dim", str(self.DIM), "--hidden", str(self.HIDDEN), "--layers", str(self.LAYERS),
                        "--heads", str(self.HEADS), "--kv-heads", str(self.KV_HEADS), "--head-dim", str(self.HEAD_DIM),
                        "--vocab", str(self.VOCAB)] + (["--untied"] if untied else []), check=True, capture_output=True)
        return path

    def stored_bytes(self, path):
        """{name: bytes} from each tensor's type and shape, by ggml's block sizes."""
        out = {}
        for t in gguf.GGUFReader(str(path)).tensors:
            block, block_bytes = gguf.GGML_QUANT_SIZES[t.tensor_type]
            out[t.name] = int(np.prod(t.shape)) // block * block_bytes
        return out

    def test_parameters_bytes_per_step_and_kv_of_a_tied_and_an_untied_file(self):
        d, h, kv = self.DIM, self.HIDDEN, self.KV_HEADS * self.HEAD_DIM
        per_layer = 2 * d * d + 2 * kv * d + 3 * h * d + 2 * d  # q, o; k, v; gate, up, down; two norms
        with tempfile.TemporaryDirectory() as tmp:
            for untied in (False, True):
                with self.subTest(untied=untied):
                    path = self.write(tmp, untied)
                    shape = size_sweep.gguf_shape(path)
                    embedding = self.VOCAB * d
                    self.assertEqual(shape["parameters"], self.LAYERS * per_layer + d + embedding * (2 if untied else 1))
                    stored = self.stored_bytes(path)
                    # tied: the embedding is the classifier, read whole; untied: one of its rows is read
                    expected = sum(stored.values())
                    if untied:
                        expected -= stored["token_embd.weight"] - stored["token_embd.weight"] // self.VOCAB
                    self.assertEqual(shape["weight_bytes_per_step"], expected)
                    self.assertEqual(shape["kv_elements_per_position"], self.LAYERS * 2 * kv)

    def test_decode_fraction_counts_each_engines_kv_and_merge_keeps_other_rows(self):
        shape = {"weight_bytes_per_step": 1_000_000, "kv_elements_per_position": 10}
        row = {"file": "a", "threads": 1, "median": {"kvx": {"decode": 20.0}, "llama.cpp": {"decode": 10.0}}}
        fractions = size_sweep.decode_fraction(row, shape, 0.1)  # 0.1 GB/s
        mean_context = 128 + 256 / 2
        self.assertAlmostEqual(fractions["kvx"], 20 * (1e6 + 10 * 4 * mean_context) / 1e8)
        self.assertAlmostEqual(fractions["llama.cpp"], 10 * (1e6 + 10 * 2 * mean_context) / 1e8)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "sweep.json"
            path.write_text(json.dumps({"rows": [{"file": "a", "threads": 1, "old": True},
                                                 {"file": "a", "threads": 2, "old": True}]}))
            merged = size_sweep.merge(path, [{"file": "a", "threads": 1}])
            self.assertEqual(merged, [{"file": "a", "threads": 2, "old": True}, {"file": "a", "threads": 1}])


# A stand-in for ik-llama-cpp-python: what run_ik_llamacpp calls of its ctypes layer, with logits whose argmax
# is the last token + 1, so that a greedy run's ids show that each step fed the previous pick back at the next
# position, and positions that do not follow on are an error.
FAKE_CTYPES_API = """
import ctypes, types
_logits = (ctypes.c_float * 8)()
_next = [0]
def llama_context_default_params():
    return types.SimpleNamespace(n_ctx=0, n_batch=0, n_ubatch=0, n_threads=0, n_threads_batch=0)
def llama_init_from_model(model, params):
    return "ctx" if params.n_ctx > 0 and params.n_threads > 0 else None
def llama_batch_init(n, embd, seqs):
    return types.SimpleNamespace(n_tokens=0, token=[0] * n, pos=[0] * n, n_seq_id=[0] * n,
                                 seq_id=[[0] for _ in range(n)], logits=[0] * n)
def llama_batch_free(batch):
    pass
def llama_decode(ctx, batch):
    if batch.pos[0] != _next[0]:
        return 1
    _next[0] = batch.pos[batch.n_tokens - 1] + 1
    for j in range(8):
        _logits[j] = 1.0 if j == (batch.token[batch.n_tokens - 1] + 1) % 8 else 0.0
    return 0
def llama_get_logits_ith(ctx, i):
    return _logits
def llama_free(ctx):
    pass
"""
FAKE_INTERNALS = """
class IkModel:
    def __init__(self, path):
        if path != "model.gguf":
            raise RuntimeError("Failed to load model: " + path)
        self.model, self.n_vocab = "model", 8
"""


class IkLlamaCppTest(unittest.TestCase):
    def run_fake(self, model):
        with tempfile.TemporaryDirectory() as tmp:
            package = Path(tmp) / "ik_llama_cpp"
            package.mkdir()
            (package / "__init__.py").write_text("")
            (package / "_ctypes_api.py").write_text(FAKE_CTYPES_API)
            (package / "_internals.py").write_text(FAKE_INTERNALS)
            peer = IkLlamaCpp("gguf", 1, model, sys.executable)
            with unittest.mock.patch.dict(os.environ, {"PYTHONPATH": tmp}):
                return subprocess.run(peer.command([3, 5], 4), capture_output=True, text=True, env=peer.environment())

    def test_runner_prefills_then_feeds_back_each_pick_at_the_next_position(self):
        proc = self.run_fake("model.gguf")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        result = IkLlamaCpp("gguf", 1, "model.gguf", sys.executable).parse(proc.stdout, proc.stderr, 4)
        self.assertEqual(result.ids, [3, 5, 6, 7, 0, 1])
        self.assertGreater(result.decode_tokens_per_s, 0)

    def test_a_model_it_cannot_load_is_a_one_line_error(self):
        proc = self.run_fake("missing.gguf")
        self.assertEqual(proc.returncode, 1)
        self.assertEqual(proc.stderr.strip(), "run_ik_llamacpp: Failed to load model: missing.gguf")

    def test_runner_without_the_package_is_a_one_line_error(self):
        proc = subprocess.run([sys.executable, "-m", "kvx_tools.bench.run_ik_llamacpp", "m.gguf", "--tokens", "1",
                               "-n", "1", "-t", "1"], capture_output=True, text=True)
        self.assertEqual(proc.returncode, 2)
        self.assertIn("setup_ik_llamacpp.sh", proc.stderr.strip().splitlines()[-1])

    def test_table_gives_kvx_against_each_peer(self):
        row = {"file": "f", "threads": 1, "median": {"llama.cpp": {"decode": 10.0, "prefill": 100.0},
                                                     "ik_llama.cpp": {"decode": 20.0, "prefill": 400.0},
                                                     "kvx": {"decode": 30.0, "prefill": 200.0}}}
        table = gguf_speed.speed_table([row], gguf_speed.ENGINES).splitlines()
        head = [c.strip() for c in table[0].strip("|").split("|")]
        cells = dict(zip(head, (c.strip() for c in table[2].strip("|").split("|"))))
        self.assertEqual(cells["kvx/llama.cpp decode"], "3.00")
        self.assertEqual(cells["kvx/ik_llama.cpp decode"], "1.50")
        self.assertEqual(cells["kvx/ik_llama.cpp prefill"], "0.50")

    def test_missing_ik_python_or_a_long_context_is_refused(self):
        for extra in (["--ik-python", "/nonexistent/python"], ["--ik-python", sys.executable, "--context", "2048"]):
            with self.subTest(extra=extra), self.assertRaises(SystemExit) as raised:
                with unittest.mock.patch("sys.stderr"):
                    gguf_speed.main(["--types", "--engines", "ik_llama.cpp", "kvx", "--kvx", sys.executable] + extra)
            self.assertEqual(raised.exception.code, 2)


if __name__ == "__main__":
    unittest.main()
