"""kvx generate --device cuda end to end on the CUDA emulation (KVX_CUDA_EMULATION builds only): the default
model's greedy text is the reference C implementation's, as on the CPU path (test_cli_generate.py): the
backend's weight upload, every step through the GEMV and CUDA graphs, and the token picked on the device. Nothing here ran on a GPU."""
import os
import unittest

from kvx_cli import SHARED_DIR, run

GOLDEN = os.path.join(SHARED_DIR, "models", "stories260K", "golden_greedy_n256_runc.txt")


class CudaEmulatedGenerateTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(GOLDEN, encoding="utf-8") as f:
            cls.golden = f.read()

    def test_greedy_on_the_cuda_backend_matches_run_c(self):
        # 96 of the golden's 256 tokens: under the sanitizers each emulated step costs a fifth of a second, and
        # greedy text is a prefix of the longer run's (stories260K's pieces are whole ASCII words and bytes).
        code, out, err = run("generate", "--device", "cuda", "-p", "", "-n", "96", "--temp", "0", timeout=900)
        self.assertEqual(code, 0, err)
        text = out.removesuffix("\n")  # the newline kvx generate ends its output with
        self.assertGreater(len(text), 200)
        self.assertTrue(self.golden.startswith(text), f"{text!r} is not the start of the golden text")


if __name__ == "__main__":
    unittest.main()
