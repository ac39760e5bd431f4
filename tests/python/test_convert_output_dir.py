#!/usr/bin/env python3
"""A conversion that fails after it started writing (an error, a full disk, Ctrl-C) leaves no model directory
that looks valid but is not: a new output directory is absent afterwards, an existing one unchanged, and the
failure is one line."""

import errno
import hashlib
import io
import resource
import signal
import subprocess
import sys
import tempfile
import unittest
from contextlib import redirect_stderr
from pathlib import Path
from unittest import mock

from kvx_tools.convert import pipeline as kvx_convert
from kvx_tools.convert.write import model_dir as kvx_writer
from kvx_tools.convert.write import safetensors_file
from kvx_tools.convert.errors import ConvertError

from kvx_test_support import STORIES_TOKENIZER, assert_one_line_failure, export_random, export_stories, run_ok

SMALL = dict(dim=16, hidden=32, layers=1, heads=2, kv_heads=1, head_dim=8, vocab=512)


def snapshot(folder):
    """{name: digest} of every file below folder, to compare a directory before and after (digests: a failed
    comparison of the bytes themselves would spend minutes in difflib)."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def limit_file_size():
    """For the child of subprocess.run: writes past 64 kB fail with EFBIG, as on a full disk (SIGXFSZ would kill
    the process instead; ignoring it turns the limit into the error)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, resource.RLIM_INFINITY))


class OutputDirectory(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory()
        cls.tmp = Path(cls._tmp.name)
        cls.stories = export_stories(cls.tmp / "stories260K.onnx")
        cls.other = export_random(cls.tmp / "random.onnx", seed=3, **SMALL)  # other weights, same vocabulary

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def _existing_model(self, name):
        """A directory holding a good conversion of stories260K plus a file of the user's own."""
        out = self.tmp / name
        run_ok(self, "kvx_tools.convert", self.stories, "-o", out, "--tokenizer", STORIES_TOKENIZER)
        (out / "notes.txt").write_text("mine")
        return out

    def assert_no_staging_left(self, folder):
        self.assertEqual([p.name for p in folder.iterdir() if ".kvx-convert-" in p.name], [])

    def test_full_disk_leaves_no_directory(self):
        out = self.tmp / "new" / "full_disk"
        full = OSError(errno.ENOSPC, "No space left on device")
        with mock.patch.object(safetensors_file.os, "pwrite", side_effect=full):
            with self.assertRaisesRegex(ConvertError, "cannot write .*full_disk: No space left on device"):
                kvx_convert.convert(self.stories, out, STORIES_TOKENIZER)
        self.assertFalse(out.exists())
        self.assert_no_staging_left(out.parent)

    def test_failure_midway_leaves_an_existing_directory_unchanged(self):
        for name, failure in (("error", RuntimeError("mid-way")), ("interrupt", KeyboardInterrupt())):
            with self.subTest(name):
                out = self._existing_model(f"existing_{name}")
                before = snapshot(out)
                # The weights are written by now (other ones than those in out); the tokenizer copy fails.
                with mock.patch.object(kvx_writer.shutil, "copyfile", side_effect=failure):
                    with self.assertRaises(type(failure)):
                        kvx_convert.convert(self.other, out, STORIES_TOKENIZER)
                self.assertEqual(snapshot(out), before)
                self.assert_no_staging_left(out)

    def test_interrupt_is_one_line(self):
        out = self.tmp / "interrupted"
        stderr = io.StringIO()
        with mock.patch.object(kvx_writer.shutil, "copyfile", side_effect=KeyboardInterrupt()), \
                redirect_stderr(stderr):
            code = kvx_convert.main([str(self.stories), "-o", str(out), "--tokenizer", str(STORIES_TOKENIZER)])
        self.assertEqual((code, stderr.getvalue()), (130, "kvx convert: interrupted\n"))
        self.assertFalse(out.exists())

    def test_real_write_error_is_one_line(self):
        """A write the OS refuses (here the file size limit) is one line, not a traceback (safetensors' own writer,
        used before, reported it as a SafetensorError)."""
        for name, existing in (("new", False), ("existing", True)):
            with self.subTest(name):
                out = self._existing_model("too_big_existing") if existing else self.tmp / "too_big_new"
                before = snapshot(out) if existing else None
                result = subprocess.run([sys.executable, "-m", "kvx_tools.convert", str(self.stories), "-o", str(out)],
                                        capture_output=True, text=True, preexec_fn=limit_file_size)
                assert_one_line_failure(self, result, "cannot write", "File too large")
                if existing:
                    self.assertEqual(snapshot(out), before)
                else:
                    self.assertFalse(out.exists())
                self.assert_no_staging_left(out if existing else out.parent)

    def test_reconverting_keeps_other_files_and_replaces_ours(self):
        out = self._existing_model("reconverted")
        run_ok(self, "kvx_tools.convert", self.other, "-o", out)
        self.assertEqual((out / "notes.txt").read_text(), "mine")
        self.assertFalse((out / "tokenizer.bin").exists())  # the new config names no tokenizer
        self.assertEqual(sorted(p.name for p in out.iterdir()), ["config.json", "model.safetensors", "notes.txt"])

    def test_new_directory_has_the_permissions_of_a_plain_mkdir(self):
        out = self.tmp / "permissions"
        run_ok(self, "kvx_tools.convert", self.stories, "-o", out)
        reference = self.tmp / "plain_mkdir"
        reference.mkdir()
        self.assertEqual(out.stat().st_mode, reference.stat().st_mode)

    def test_output_that_is_a_file_is_refused(self):
        path = self.tmp / "a_file"
        path.write_text("not a directory")
        result = subprocess.run([sys.executable, "-m", "kvx_tools.convert", str(self.stories), "-o", str(path)],
                                capture_output=True, text=True)
        assert_one_line_failure(self, result, "a_file", "not a directory")
        self.assertEqual(path.read_text(), "not a directory")


if __name__ == "__main__":
    unittest.main()
