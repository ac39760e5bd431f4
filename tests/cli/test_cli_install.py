"""cmake --install gives a kvx that runs wherever its prefix is moved: installed into one folder, moved to
another, it finds its built-in model and its converter relative to itself, converts an ONNX file and
generates from there, and prints llama2.c run.c's greedy text.

The converter runs in a Python that has the converter's dependencies (onnx, numpy, ...) but not kvx_tools:
the build's Python has the checkout's kvx_tools installed editable, which would hide an installed kvx that
still reached into the checkout. So the test makes a venv whose only link to the build's Python is a .pth
naming its site-packages folders: packages there import, but the editable install (itself a .pth file, which
Python reads only in a site folder) does not."""
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import unittest

from kvx_cli import FIXTURES, SHARED_DIR

BUILD_DIR = os.environ["KVX_BUILD_DIR"]
CMAKE = os.environ["KVX_CMAKE"]
STORIES = os.path.join(SHARED_DIR, "models", "stories260K")
GOLDEN = os.path.join(STORIES, "golden_greedy_n256_runc.txt")


def run(args, env=None):
    proc = subprocess.run(args, capture_output=True, timeout=300, env=env)
    return proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")


def python_without_kvx_tools(folder):
    """A Python that imports this one's third-party packages but finds kvx_tools nowhere."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", folder], check=True, timeout=120)
    python = os.path.join(folder, "bin", "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    ours = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    with open(os.path.join(site, "kvx_test_dependencies.pth"), "w", encoding="utf-8") as f:
        f.write("\n".join(ours) + "\n")
    return python


class InstallTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="kvx_install_")
        first = os.path.join(cls.tmp, "first")
        code, out, err = run([CMAKE, "--install", BUILD_DIR, "--prefix", first])
        if code != 0:
            raise AssertionError(f"cmake --install failed:\n{out}\n{err}")
        cls.prefix = os.path.join(cls.tmp, "moved", "prefix")
        shutil.move(first, cls.prefix)
        cls.kvx_bin = os.path.join(cls.prefix, "bin", "kvx")
        cls.python = python_without_kvx_tools(os.path.join(cls.tmp, "venv"))
        # The environment a user of the install has: no KVX_ variables of the build, no PYTHONPATH into the
        # checkout; only the Python to convert with.
        cls.env = {k: v for k, v in os.environ.items() if not k.startswith("KVX_") and k != "PYTHONPATH"}
        cls.env["KVX_PYTHON"] = cls.python
        with open(GOLDEN, encoding="utf-8") as f:
            cls.golden = f.read()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def kvx(self, *args):
        return run([self.kvx_bin, *args], env=self.env)

    def test_the_test_python_cannot_import_kvx_tools_but_has_its_dependencies(self):
        code, _, err = run([self.python, "-c", "import kvx_tools"], env=self.env)
        self.assertNotEqual(code, 0)
        self.assertIn("No module named 'kvx_tools'", err)
        code, _, err = run([self.python, "-c", "import onnx, numpy, safetensors, jinja2"], env=self.env)
        self.assertEqual(code, 0, err)

    def test_the_moved_install_generates_with_its_built_in_model(self):
        code, out, err = self.kvx("generate", "-p", "", "-n", "256", "--temp", "0")
        self.assertEqual(code, 0, err)
        self.assertEqual(out, self.golden)

    def test_the_moved_install_converts_and_generates_from_what_it_converted(self):
        model_dir = os.path.join(self.tmp, "converted")
        code, _, err = self.kvx("convert", os.path.join(FIXTURES, "stories260K", "model.onnx"), "-o", model_dir,
                                "--tokenizer", os.path.join(STORIES, "tok512.bin"))
        self.assertEqual(code, 0, err)
        code, out, err = self.kvx("generate", "-m", model_dir, "-p", "", "-n", "256", "--temp", "0")
        self.assertEqual(code, 0, err)
        self.assertEqual(out, self.golden)

    def test_it_looks_beside_itself_not_where_it_was_built(self):
        # A copy of the moved prefix without its data folder: kvx names the place it looked, inside the copy,
        # and the converter is not found, although the build tree and the first copy still have both.
        bare = os.path.join(self.tmp, "bare")
        os.makedirs(os.path.join(bare, "bin"))
        kvx = shutil.copy(self.kvx_bin, os.path.join(bare, "bin", "kvx"))
        code, _, err = run([kvx, "generate", "-n", "1"], env=self.env)
        self.assertEqual(code, 1)
        self.assertIn(f"the built-in model is missing from '{bare}/share/kvx/models/stories260K'", err)
        code, _, err = run([kvx, "convert", os.path.join(FIXTURES, "stories260K", "model.onnx"), "-o",
                            os.path.join(self.tmp, "not_converted")], env=self.env)
        self.assertNotEqual(code, 0)
        self.assertIn("No module named 'kvx_tools'", err)


if __name__ == "__main__":
    unittest.main()
