"""kvx loads the CUDA backend only for --device cuda (issue 30): a run on the CPU maps no CUDA library, neither
linked into kvx nor loaded later, and --device cuda loads the plugin (engine/runtime/backend_plugin.h).

What a run maps comes from the dynamic loader itself (LD_DEBUG=files): it names every object it loads, the
libraries kvx is linked against and every dlopen() to the end of the run, so nothing escapes the way a look
at /proc/<pid>/maps at one instant could miss a library mapped after it."""
import os
import re
import subprocess
import unittest

from kvx_cli import KVX

# The CUDA plugin where the build makes one (ctest sets it for a build with the CUDA backend, real or emulated).
PLUGIN = os.environ.get("KVX_CUDA_PLUGIN", "")
CUDA_LIBRARY = re.compile(r"cuda|cublas|nvrtc|nvjitlink", re.IGNORECASE)


def loaded_objects(*args):
    """(exit code, stderr without the loader's lines, every object the dynamic loader loaded) for `kvx ARGS`."""
    env = dict(os.environ, LD_DEBUG="files")
    proc = subprocess.run([KVX, *args], capture_output=True, timeout=600, env=env)
    err = proc.stderr.decode("utf-8", "replace")
    loaded, rest = [], []
    for line in err.splitlines():
        found = re.match(r"\s*\d+:\s+file=(\S+) \[\d+\];\s+(needed by|dynamically loaded by)", line)
        if found:
            loaded.append(found.group(1))
        elif not re.match(r"\s*\d+:", line):
            rest.append(line)
    return proc.returncode, "\n".join(rest), loaded


class CudaOnDemandTest(unittest.TestCase):
    def assert_no_cuda_library(self, *args):
        code, err, loaded = loaded_objects(*args)
        self.assertEqual(code, 0, err)
        # The loader's lines were read: libc is loaded by every run, so an empty list means a parsing fault.
        self.assertTrue(any("libc.so" in name for name in loaded), loaded)
        self.assertEqual([name for name in loaded if CUDA_LIBRARY.search(name)], [], f"kvx {' '.join(args)}")

    def test_tokenize_maps_no_cuda_library(self):
        self.assert_no_cuda_library("tokenize", "-p", "hello world")

    def test_generate_on_the_cpu_maps_no_cuda_library(self):
        self.assert_no_cuda_library("generate", "-p", "Once upon a time", "-n", "8")

    def test_device_cuda_loads_the_plugin(self):
        # With a GPU (or the emulation) the token is generated; without one kvx says why after loading the plugin.
        # Either way the plugin was loaded, which shows the loader's list sees what kvx dlopen()s.
        code, err, loaded = loaded_objects("generate", "--device", "cuda", "-p", "Once", "-n", "1")
        if not PLUGIN:
            self.assertNotEqual(code, 0)
            self.assertIn("this kvx was built without the CUDA backend", err)
            return
        self.assertIn(os.path.realpath(PLUGIN), [os.path.realpath(name) for name in loaded], err)
        if code != 0:
            self.assertRegex(err, r"^kvx: --device cuda: ", err)
            self.assertEqual(len(err.strip().splitlines()), 1, err)


if __name__ == "__main__":
    unittest.main()
