"""kvx generate end to end: the reference C implementation's greedy text, streamed, with its stats."""
import os
import unittest

from kvx_cli import SHARED_DIR, run

GOLDEN = os.path.join(SHARED_DIR, "models", "stories260K", "golden_greedy_n256_runc.txt")


class GenerateTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(GOLDEN, encoding="utf-8") as f:
            cls.golden = f.read()

    def generate(self, *extra):
        code, out, err = run("generate", "-p", "", "-n", "256", "--temp", "0", *extra)
        self.assertEqual(code, 0, err)
        return out, err

    def test_greedy_matches_run_c(self):
        out, _ = self.generate()
        self.assertEqual(out, self.golden)

    def test_greedy_is_the_same_for_every_kernel_set_thread_count_and_block_size(self):
        for extra in (["-t", "1"], ["-t", "2"], ["--simd", "reference"], ["--simd", "portable"],
                      ["--block-size", "1"], ["--block-size", "256"]):
            with self.subTest(extra=extra):
                self.assertEqual(self.generate(*extra)[0], self.golden)

    def test_longer_generation_continues_the_golden_text(self):
        code, out, err = run("generate", "-p", "", "-n", "400", "--temp", "0")
        self.assertEqual(code, 0, err)
        self.assertTrue(out.startswith(self.golden[:-1]), out[:300])
        self.assertGreater(len(out), len(self.golden))

    def test_stats_on_stderr(self):
        _, err = self.generate()
        self.assertRegex(err, r"prompt 1 tokens, prefill [0-9.]+ ms \([0-9.]+ tokens/s\)")
        self.assertRegex(err, r"generated 256 tokens, 255 decode steps in [0-9.]+ ms \([0-9.]+ tokens/s\)")
        # 256 positions in blocks of 16: 16 blocks of 32 for the 512-token context.
        self.assertRegex(err, r"KV cache 16 of 32 blocks of 16 tokens, [0-9]+ of [0-9]+ bytes")

    def test_prompt_is_echoed_and_continued(self):
        code, out, err = run("generate", "-p", "Once upon a time", "-n", "20", "--temp", "0")
        self.assertEqual(code, 0, err)
        self.assertTrue(out.startswith("Once upon a time"), out)
        code, ids, _ = run("tokenize", "-p", "Once upon a time")
        self.assertEqual(code, 0)
        self.assertIn(f"prompt {len(ids.split(','))} tokens", err)

    def test_prompt_from_file(self):
        path = os.path.join(os.getcwd(), "prompt.txt")
        with open(path, "w", encoding="utf-8") as f:
            f.write("Lily went")
        code, out, err = run("generate", "-f", path, "-n", "10", "--temp", "0")
        self.assertEqual(code, 0, err)
        self.assertTrue(out.startswith("Lily went"), out)

    def test_sampling_is_reproducible_with_a_seed(self):
        args = ("generate", "-p", "Once", "-n", "60", "--temp", "0.9", "--top-k", "20", "--top-p", "0.9")
        a = run(*args, "--seed", "5")
        b = run(*args, "--seed", "5")
        c = run(*args, "--seed", "6")
        self.assertEqual(a[0], 0, a[2])
        self.assertEqual(a[1], b[1])
        self.assertNotEqual(a[1], c[1])
        self.assertIn("seed 5", a[2])


if __name__ == "__main__":
    unittest.main()
