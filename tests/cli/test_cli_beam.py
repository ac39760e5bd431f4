"""kvx generate --beams: the best hypothesis equals the one of tools/kvx_tools/fixtures/beam_search_reference.py (numpy
beam search over ONNX Runtime, in the fixtures' beam/cases.json), --beams 1 equals greedy decoding, the
accounting lines are printed, and impossible flag combinations exit non-zero naming the problem."""
import json
import os
import unittest

from kvx_cli import FIXTURES, run

STORIES_PROMPT = "Once upon a time"


def reference_cases():
    """The reference's cases kvx generate can reproduce: models without a tokenizer (ids in, ids out) whose
    stop tokens are the model's own."""
    with open(os.path.join(FIXTURES, "beam", "cases.json"), encoding="utf-8") as file:
        cases = json.load(file)
    return [c for c in cases if c["name"].endswith("/own_stops") and c["fixture"] != "stories260K"]


class BeamCliTest(unittest.TestCase):
    def test_best_hypothesis_equals_the_reference(self):
        cases = reference_cases()
        self.assertGreaterEqual(len(cases), 8)
        for case in cases:
            with self.subTest(case=case["name"]):
                best = case["hypotheses"][0]
                generated = best["tokens"][:-1] if best["stopped_by_token"] else best["tokens"]
                code, out, err = run("generate", "-m", os.path.join(FIXTURES, case["fixture"], "model"),
                                     "--tokens", ",".join(map(str, case["prompt"])),
                                     "-n", str(case["max_new_tokens"]), "--beams", str(case["num_beams"]),
                                     "--length-penalty", str(case["length_penalty"]), "--block-size", "4", "-t", "1")
                self.assertEqual(code, 0, err)
                self.assertEqual(out.strip(), ",".join(map(str, case["prompt"] + generated)))
                self.assertIn(f"beam search, {case['num_beams']} beams", err)

    def test_one_beam_is_greedy(self):
        for args in (["-p", STORIES_PROMPT, "-n", "80"],
                     ["-m", os.path.join(FIXTURES, "rand_gpt2_hd24_l3_v263_ctx65", "model"), "--tokens",
                      "5,77,3,250", "-n", "40"]):
            with self.subTest(args=args):
                greedy = run("generate", *args, "--temp", "0")
                beam = run("generate", *args, "--beams", "1")
                self.assertEqual(greedy[0], 0, greedy[2])
                self.assertEqual(beam[0], 0, beam[2])
                self.assertEqual(beam[1], greedy[1])

    def test_accounting_lines(self):
        code, out, err = run("generate", "-p", STORIES_PROMPT, "-n", "64", "--beams", "8", "--block-size", "8",
                             "-t", "1")
        self.assertEqual(code, 0, err)
        self.assertTrue(out.startswith(STORIES_PROMPT), out)
        for expected in ("beam search, 8 beams:", "tokens/s", "KV peak", "shared by the beams",
                         "a contiguous cache per beam (8 beams x", "bytes per step (copy-on-write)",
                         "a physical reorder moves"):
            self.assertIn(expected, err)

    def test_sixty_four_beams_get_a_pool_that_fits(self):
        # The default pool holds one sequence of the context; 64 beams need their own blocks.
        code, out, err = run("generate", "-p", STORIES_PROMPT, "-n", "100", "--beams", "64", "-c", "128", "-t", "1")
        self.assertEqual(code, 0, err)
        self.assertIn("beam search, 64 beams", err)

    def test_impossible_combinations_are_refused(self):
        refusals = [
            (["--beams", "0"], "--beams must be from 1 to 64, not 0"),
            (["--beams", "65"], "--beams must be from 1 to 64, not 65"),
            (["--beams", "-3"], "--beams must be from 1 to 64, not -3"),
            (["--beams", "2", "--temp", "0.7"], "cannot be combined with --temp > 0"),
            (["--beams", "2", "--top-k", "5"], "cannot be combined with --top-k"),
            (["--beams", "2", "--top-p", "0.9"], "cannot be combined with --top-p"),
            (["--beams", "2", "--length-penalty", "-0.5"], "--length-penalty must be a finite number >= 0"),
            (["--beams", "2", "--length-penalty", "inf"], "--length-penalty must be a finite number >= 0"),
            (["--beams", "2", "--length-penalty", "nan"], "--length-penalty must be a finite number >= 0"),
            (["--length-penalty", "2"], "--length-penalty needs --beams"),
            (["--beams", "2", "-n", "0"], "--beams needs -n >= 1"),
            (["--beams", "4", "-n", "600"], "exceed the context of"),
        ]
        for flags, message in refusals:
            with self.subTest(flags=flags):
                code, out, err = run("generate", "-p", STORIES_PROMPT, *flags)
                self.assertEqual(code, 1, err)
                self.assertEqual(out, "")
                self.assertEqual(len(err.strip().splitlines()), 1, err)
                self.assertIn(message, err)


if __name__ == "__main__":
    unittest.main()
