"""kvx logits writes what ONNX Runtime computes for the same tokens (fixtures from make_fixtures.py)."""
import os
import tempfile
import unittest

import numpy as np

from kvx_cli import FIXTURES, run


class LogitsTest(unittest.TestCase):
    def check_fixture(self, name, *extra, tolerance=1e-4):
        fixture = os.path.join(FIXTURES, name)
        tokens = np.load(os.path.join(fixture, "tokens.npy"))
        ref = np.load(os.path.join(fixture, "ref_logits.npy"))
        n_prefill = 32
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "logits.npy")
            code, _, err = run("logits", "-m", os.path.join(fixture, "model"), "--tokens",
                               ",".join(str(int(t)) for t in tokens), "--n-prefill", str(n_prefill), "-o", out, *extra)
            self.assertEqual(code, 0, err)
            got = np.load(out)
        self.assertEqual(got.shape, ref.shape)
        self.assertEqual(got.dtype, np.float32)
        for pos in range(len(tokens)):
            scale = np.abs(ref[pos]).max()
            self.assertLessEqual(np.abs(got[pos] - ref[pos]).max(), tolerance * scale, f"{name} position {pos}")
        return got

    def test_stories260k(self):
        self.check_fixture("stories260K")
        self.check_fixture("stories260K", "--block-size", "1", "-t", "1")

    def test_gpt2(self):
        self.check_fixture("rand_gpt2_hd8_l6_v1001_untied_ext")
        self.check_fixture("ortgenai_gpt2_l5_v1000", "--block-size", "1")

    def test_fp16_kv_cache(self):
        f32 = self.check_fixture("stories260K")
        f16 = self.check_fixture("stories260K", "--kv-dtype", "f16", tolerance=2e-3)
        self.assertFalse(np.array_equal(f16, f32), "--kv-dtype f16 gave the fp32 cache's logits")

    def test_prompt_instead_of_tokens(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "logits.npy")
            code, _, err = run("logits", "-p", "Once upon a time", "-o", out)
            self.assertEqual(code, 0, err)
            code, ids, _ = run("tokenize", "-p", "Once upon a time")
            self.assertEqual(np.load(out).shape, (len(ids.split(",")), 512))

    @unittest.skipUnless(os.path.exists("/dev/nvidia0"), "no NVIDIA GPU: --device cuda is checked on a GPU only")
    def test_cuda_device(self):
        self.check_fixture("stories260K", "--device", "cuda")
        self.check_fixture("rand_gpt2_hd8_l6_v1001_untied_ext", "--device", "cuda", "--block-size", "4")
        self.check_fixture("stories260K", "--device", "cuda", "--kv-dtype", "f16", tolerance=2e-3)


if __name__ == "__main__":
    unittest.main()
