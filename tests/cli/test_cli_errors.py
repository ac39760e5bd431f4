"""Every bad input to the kvx command line: one clear line on stderr, a non-zero exit, no crash."""
import os
import tempfile
import unittest

import numpy as np
import onnx
from onnx import numpy_helper

from kvx_cli import FIXTURES, run


class ErrorsTest(unittest.TestCase):
    def assert_fails(self, args, message):
        code, out, err = run(*args)
        self.assertNotEqual(code, 0, f"kvx {' '.join(args)} succeeded:\n{out}")
        self.assertLess(code, 128, f"kvx {' '.join(args)} died from a signal")
        self.assertIn(message, err, f"kvx {' '.join(args)}")
        self.assertNotIn("terminate called", err)
        self.assertEqual(len(err.strip().splitlines()), 1, f"kvx {' '.join(args)}: not one line:\n{err}")

    def test_bad_flags(self):
        self.assert_fails(["generate", "--bogus"], "--bogus")
        self.assert_fails(["generate", "-n"], "-n")
        self.assert_fails(["generate", "-n", "many"], "many")
        self.assert_fails(["generate", "--block-size", "3"], "block size 3 is invalid")
        self.assert_fails(["generate", "--block-size", "512"], "block size 512 is invalid")
        self.assert_fails(["generate", "--temp", "-1"], "--temp")
        self.assert_fails(["generate", "--top-p", "1.5"], "--top-p")
        self.assert_fails(["generate", "--top-k", "-3"], "--top-k")
        self.assert_fails(["generate", "-n", "-5"], "-n must be")
        self.assert_fails(["generate", "--simd", "bogus"], "unknown --simd 'bogus'")
        self.assert_fails(["generate", "--kv-dtype", "q8"], "unknown --kv-dtype 'q8'")
        self.assert_fails(["generate", "--beams", "4", "--speculative", "4", "--temp", "0"],
                          "--speculative cannot be combined with --beams")
        self.assert_fails(["generate", "-p", "x", "-f", "y"], "excludes")
        self.assert_fails(["generate", "-p", "x", "--tokens", "1"], "excludes")
        self.assert_fails(["generate", "--tokens", "1,x"], "'x' is not a token id")
        self.assert_fails(["generate", "--tokens", "1,512", "-n", "3"], "token id 512 is outside the vocabulary of 512")
        self.assert_fails(["tokenize"], "one of --prompt, --file or --ids is required")
        self.assert_fails(["tokenize", "-p", "x", "--ids", "1"], "excludes")
        self.assert_fails(["tokenize", "--ids", "1,,2"], "'' is not a token id")
        self.assert_fails(["tokenize", "--ids", "512"], "token id 512 is outside the model's vocabulary of 512")
        self.assert_fails(["logits", "--tokens", "1,2"], "--output")
        self.assert_fails(["logits", "--tokens", "1,x", "-o", "a.npy"], "'x' is not a token id")
        self.assert_fails(["logits", "--tokens", "1,2", "--n-prefill", "3", "-o", "a.npy"], "--n-prefill 3 exceeds")
        self.assert_fails(["logits", "--tokens", "1,9999", "-o", "a.npy"], "token id 9999 is outside the vocabulary")
        self.assert_fails([], "subcommand")
        self.assert_fails(["frobnicate"], "frobnicate")
        self.assert_fails(["convert", "model.onnx", "-o", "out", "--dtype", "bf16"], "--dtype")

    def test_context_limits(self):
        self.assert_fails(["generate", "-c", "100000"], "exceeds the model's maximum of 512")
        long_prompt = "Once upon a time there was a dog. " * 20
        self.assert_fails(["generate", "-c", "32", "-p", long_prompt], "longer than the context of 32")
        self.assert_fails(["generate", "-c", "16", "-n", "100"], "exceed the context of 16 tokens")

    def test_missing_files(self):
        self.assert_fails(["generate", "-m", "/nonexistent/model"], "no model at '/nonexistent/model'")
        self.assert_fails(["generate", "-f", "/nonexistent/prompt.txt"], "cannot read prompt file")
        self.assert_fails(["convert", "/nonexistent/model.onnx", "-o", "out"], "/nonexistent/model.onnx")
        self.assert_fails(["tokenize", "-m", "/nonexistent", "-p", "x"], "no model at")
        self.assert_fails(["tokenize", "-f", "/nonexistent/text.txt"], "cannot read text file")

    def test_convert_checks_weights_unless_told_not_to(self):
        """kvx convert passes --check-weights / --no-check-weights on to the converter."""
        with tempfile.TemporaryDirectory() as tmp:
            model = onnx.load(os.path.join(FIXTURES, "stories260K", "model.onnx"))
            tensor = next(t for t in model.graph.initializer if numpy_helper.to_array(t).ndim == 2)
            poisoned = numpy_helper.to_array(tensor).copy()
            poisoned[0, 0] = np.nan
            tensor.CopyFrom(numpy_helper.from_array(poisoned, tensor.name))
            path = os.path.join(tmp, "nan.onnx")
            onnx.save(model, path)
            out = os.path.join(tmp, "out")
            self.assert_fails(["convert", path, "-o", out], "holds 1 non-finite value")
            self.assert_fails(["convert", path, "-o", out, "--check-weights"], "holds 1 non-finite value")
            code, _, err = run("convert", path, "-o", out, "--no-check-weights")
            self.assertEqual(code, 0, err)

    def test_unsupported_simd_level(self):
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            has_avx512 = " avx512f" in f.read()
        if has_avx512:
            self.skipTest("this CPU has AVX-512, so --simd avx512 is valid here")
        self.assert_fails(["generate", "--simd", "avx512"], "avx512")

    def test_device_choice(self):
        self.assert_fails(["generate", "--device", "tpu"], "unknown --device 'tpu'")
        # Without a GPU, or in a build without CUDA, --device cuda names why; with one, --simd still cannot go
        # with it. Either way the run stops before any text. A CUDA emulation build has a device (emulated on
        # the CPU, test_cli_cuda_emulated), so there --device cuda alone runs.
        self.assert_fails(["generate", "--device", "cuda", "--simd", "avx2"], "--device cuda")
        if not os.path.exists("/dev/nvidia0") and not os.environ.get("KVX_CUDA_EMULATED"):
            self.assert_fails(["generate", "--device", "cuda"], "--device cuda")

    def test_help_documents_every_flag(self):
        expected = {
            "generate": ["-m", "-p", "-f", "--tokens", "-n", "--temp", "--top-k", "--top-p", "--seed", "-t", "-c",
                         "--block-size", "--simd", "--kv-dtype", "--device", "--verbose"],
            "logits": ["-m", "--tokens", "-p", "-o", "--n-prefill", "-t", "-c", "--block-size", "--simd", "--device"],
            "convert": ["-o", "--tokenizer", "--merges", "--chat-template", "--max-seq-len", "--dtype",
                        "--check-weights", "--no-check-weights"],
            "tokenize": ["-m", "-p", "-f", "--ids", "--no-bos", "--stats"],
        }
        code, out, _ = run("--help")
        self.assertEqual(code, 0)
        for command, flags in expected.items():
            self.assertIn(command, out)
            code, out_cmd, _ = run(command, "--help")
            self.assertEqual(code, 0)
            for flag in flags:
                self.assertIn(flag, out_cmd, f"kvx {command} --help does not mention {flag}")


if __name__ == "__main__":
    unittest.main()
