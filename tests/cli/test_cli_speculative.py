"""kvx generate --speculative K: the same text as plain decoding (llama2.c run.c's greedy text, and a
seeded sampled text), its stats line, and every bad flag."""
import os
import re
import unittest

from kvx_cli import SHARED_DIR, run

GOLDEN = os.path.join(SHARED_DIR, "models", "stories260K", "golden_greedy_n256_runc.txt")
REPETITIVE = "Tom and Lily went to the park. " * 4
STATS = re.compile(r"kvx: speculative: drafted (\d+) tokens, accepted (\d+) \(([0-9.]+)%\), (\d+) forward passes, "
                   r"([0-9.]+) tokens per pass")


class SpeculativeTest(unittest.TestCase):
    def generate(self, *args):
        # One thread unless a test says otherwise: the suite runs beside other jobs, where a team of spinning
        # threads only waits for cores.
        args = args if "-t" in args else (*args, "-t", "1")
        code, out, err = run("generate", *args)
        self.assertEqual(code, 0, err)
        return out, err

    def test_greedy_text_is_run_c_for_every_k(self):
        with open(GOLDEN, encoding="utf-8") as f:
            golden = f.read()
        for k in ("1", "4", "8", "32"):
            with self.subTest(k=k):
                out, err = self.generate("-p", "", "-n", "256", "--temp", "0", "--speculative", k)
                self.assertEqual(out, golden)
                self.assertRegex(err, r"generated 256 tokens, \d+ decode steps")

    def test_same_text_and_stats_on_a_repetitive_prompt(self):
        plain, plain_err = self.generate("-p", REPETITIVE, "-n", "120", "--temp", "0")
        self.assertIsNone(STATS.search(plain_err))  # plain decoding prints no speculative line
        for extra in (["--speculative", "6"], ["--speculative", "3", "--lookup-ngram", "1"],
                      ["--speculative", "6", "--block-size", "1"]):
            with self.subTest(extra=extra):
                out, err = self.generate("-p", REPETITIVE, "-n", "120", "--temp", "0", *extra)
                self.assertEqual(out, plain)
                stats = STATS.search(err)
                self.assertIsNotNone(stats, err)
                drafted, accepted, passes = int(stats[1]), int(stats[2]), int(stats[4])
                self.assertGreater(accepted, 0)
                self.assertLessEqual(accepted, drafted)
                self.assertEqual(passes + accepted, 119)  # 120 tokens, the first from the prefill
                self.assertRegex(err, rf"generated 120 tokens, {passes} decode steps")

    def test_sampled_text_is_the_same_for_the_same_seed(self):
        args = ("-p", REPETITIVE, "-n", "100", "--temp", "0.8", "--seed", "3")
        plain, _ = self.generate(*args)
        out, _ = self.generate(*args, "--speculative", "5")
        self.assertEqual(out, plain)

    def assert_fails(self, args, message):
        code, out, err = run(*args)
        self.assertNotEqual(code, 0, f"kvx {' '.join(args)} succeeded:\n{out}")
        self.assertLess(code, 128, f"kvx {' '.join(args)} died from a signal")
        self.assertIn(message, err, f"kvx {' '.join(args)}")
        self.assertEqual(len(err.strip().splitlines()), 1, f"kvx {' '.join(args)}: not one line:\n{err}")

    def test_bad_flags(self):
        k_range = "--speculative must be from 1 to 32 draft tokens"
        n_range = "--lookup-ngram must be from 1 to 8"
        for command in ("generate", "chat"):
            with self.subTest(command=command):
                self.assert_fails([command, "--speculative", "0"], f"{k_range}, not 0")
                self.assert_fails([command, "--speculative", "33"], f"{k_range}, not 33")
                self.assert_fails([command, "--speculative", "-2"], k_range)
                self.assert_fails([command, "--speculative", "many"], "many")
                self.assert_fails([command, "--speculative", "4", "--lookup-ngram", "0"], f"{n_range}, not 0")
                self.assert_fails([command, "--speculative", "4", "--lookup-ngram", "9"], f"{n_range}, not 9")
                self.assert_fails([command, "--lookup-ngram", "2"], "--lookup-ngram needs --speculative K")

if __name__ == "__main__":
    unittest.main()
