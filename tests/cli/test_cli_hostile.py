"""The kvx command line against careless and hostile input: unbounded prompt files, folders named as files,
output to a full device, model folders with FIFOs, foreign paths, coerced values and NaN weights. Each case
once crashed, hung, allocated without bound or exited 0 having lost output; each must now end in one line on
stderr and a non-zero exit, within seconds."""
import json
import os
import shutil
import stat
import subprocess
import tempfile
import unittest

import numpy as np

from kvx_cli import FIXTURES, KVX


def run(args, stdout=subprocess.PIPE, timeout=60):
    """(exit code, stdout, stderr) of kvx ARGS; a hang fails the test instead of the suite."""
    proc = subprocess.run([KVX, *args], stdout=stdout, stderr=subprocess.PIPE, timeout=timeout)
    out = proc.stdout.decode("utf-8", "replace") if proc.stdout is not None else ""
    return proc.returncode, out, proc.stderr.decode("utf-8", "replace")


class HostileInputTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="kvx_hostile_")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def assert_refused(self, args, message, stdout=subprocess.PIPE):
        code, out, err = run(args, stdout)
        self.assertEqual(code, 1, f"kvx {' '.join(args)}: exit {code}\n{err}")
        self.assertIn(message, err)
        self.assertEqual(len(err.strip().splitlines()), 1, f"not one line:\n{err}")

    def model_copy(self):
        """A copy of the stories260K fixture's model folder to damage."""
        dst = os.path.join(self.tmp, "model")
        shutil.copytree(os.path.join(FIXTURES, "stories260K", "model"), dst)
        return dst

    def edit_config(self, model, **fields):
        path = os.path.join(model, "config.json")
        config = json.load(open(path))
        config.update(fields)
        with open(path, "w") as f:
            f.write(json.dumps(config))

    def test_prompt_files_are_bounded_and_folders_refused(self):
        # /dev/zero never ended before; the built-in model's context of 512 tokens bounds the read at 512 KiB.
        self.assert_refused(["generate", "-f", "/dev/zero", "-n", "1"], "prompt file '/dev/zero' is longer than 524288 bytes")
        self.assert_refused(["generate", "-f", self.tmp, "-n", "1"], f"prompt file '{self.tmp}' is a directory")
        self.assert_refused(["tokenize", "-f", self.tmp], "is a directory")
        # A pipe is still a prompt: -f /dev/stdin reads it.
        proc = subprocess.run([KVX, "generate", "-f", "/dev/stdin", "-n", "2", "--temp", "0"], input=b"Once upon",
                              capture_output=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertTrue(proc.stdout.startswith(b"Once upon"))

    def test_output_to_a_full_device_is_an_error(self):
        with open("/dev/full", "wb") as full:
            for args in (["generate", "-n", "3"], ["generate", "-p", "hi", "-n", "3", "--beams", "2"],
                         ["tokenize", "-p", "hello"], ["tokenize", "--ids", "1,403"]):
                with self.subTest(args=args):
                    self.assert_refused(args, "cannot write to standard output: No space left on device", stdout=full)
        self.assert_refused(["logits", "--tokens", "1,2,3", "-o", "/dev/full"],
                            "cannot write the array to '/dev/full': No space left on device")
        self.assertTrue(stat.S_ISCHR(os.stat("/dev/full").st_mode))  # written to, never replaced or removed

    def test_logits_written_whole_or_not_at_all(self):
        readonly = os.path.join(self.tmp, "readonly")
        os.mkdir(readonly, 0o500)
        target = os.path.join(readonly, "l.npy")
        code, _, err = run(["logits", "--tokens", "1,2,3", "-o", target])
        if os.geteuid() != 0:  # root writes anywhere
            self.assertEqual(code, 1, err)
            self.assertIn(f"cannot write the array to '{target}'", err)
        ok = os.path.join(self.tmp, "l.npy")
        code, _, err = run(["logits", "--tokens", "1,2,3", "-o", ok])
        self.assertEqual(code, 0, err)
        self.assertEqual(np.load(ok).shape, (3, 512))
        self.assertEqual(sorted(os.listdir(self.tmp)), ["l.npy", "readonly"])  # no temporary left behind

    def test_beams_fit_when_the_answer_ends_in_the_prompts_last_block(self):
        code, out, err = run(["generate", "-p", "hi", "-n", "5", "--beams", "4"])
        self.assertEqual(code, 0, err)
        self.assertIn("beam search, 4 beams", err)

    def test_a_fifo_in_a_model_folder_is_refused_at_once(self):
        for name in ("config.json", "model.safetensors", "tokenizer.bin"):
            with self.subTest(name=name):
                model = self.model_copy()
                os.remove(os.path.join(model, name))
                os.mkfifo(os.path.join(model, name))
                self.assert_refused(["generate", "-m", model, "-n", "1"], f"{name}' is not a regular file")
                shutil.rmtree(model)

    def test_config_fields_are_checked_not_coerced(self):
        for fields, message in (({"weights": {"file": "../../../etc/passwd", "dtype": "f32"}},
                                 "'weights.file' = '../../../etc/passwd' leaves the model folder"),
                                ({"tokenizer": {"type": "llama2c", "file": "/etc/passwd"}},
                                 "'tokenizer.file' = '/etc/passwd' is an absolute path"),
                                ({"bos_token_id": 1e20}, "'bos_token_id' must be an integer from -1 to 511, not 1e+20"),
                                ({"eos_token_ids": 2}, "'eos_token_ids' must be a list, not 2"),
                                ({"n_heads": 65536, "head_dim": 65536},
                                 "'n_heads' must be an integer from 1 to 1024, not 65536"),
                                ({"max_seq_len": 1 << 30}, "'max_seq_len' must be an integer from 1 to 16777216"),
                                ({"norm_eps": -1e-5}, "'norm_eps' must be a number above 0 and below 1")):
            with self.subTest(fields=fields):
                model = self.model_copy()
                self.edit_config(model, **fields)
                self.assert_refused(["generate", "-m", model, "-n", "1"], message)
                shutil.rmtree(model)

    def test_nan_weights_are_found_by_check_weights(self):
        model = self.model_copy()
        weights = os.path.join(model, "model.safetensors")
        with open(weights, "r+b") as f:
            header_len = int.from_bytes(f.read(8), "little")
            begin = json.loads(f.read(header_len))["layers.0.w_down"]["data_offsets"][0]
            f.seek(8 + header_len + begin + 4 * 100)
            f.write(np.array([np.nan], dtype=np.float32).tobytes())
        self.assert_refused(["generate", "-m", model, "-n", "2", "--check-weights"],
                            "tensor 'layers.0.w_down' holds 1 non-finite values (NaN or infinity)")
        code, _, err = run(["generate", "-m", model, "-n", "2"])  # not asked: it runs, as any engine would
        self.assertEqual(code, 0, err)


if __name__ == "__main__":
    unittest.main()
