"""tools/include_graph.py on a copy of the repository with one bad edge planted at a time: each rule of the
script (the layers, the named forbidden edges, includes backed by CMake links, the links' own layers, the
Python tools' imports) must fail the copy, exit 1 and name the planted line and the rule. The copy without a
plant must pass, so that what fails is the plant."""
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

SOURCE = os.environ["KVX_SOURCE_DIR"]
SCRIPT = os.path.join(SOURCE, "tools", "include_graph.py")
spec = importlib.util.spec_from_file_location("include_graph", SCRIPT)
include_graph = importlib.util.module_from_spec(spec)
spec.loader.exec_module(include_graph)


class PlantedEdgeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.scratch = tempfile.mkdtemp(prefix="kvx_include_graph_")
        cls.pristine = os.path.join(cls.scratch, "pristine")
        for path in include_graph.walk(SOURCE):  # every file a rule reads, nothing else
            if os.path.basename(path).startswith("."):
                continue
            os.makedirs(os.path.join(cls.pristine, os.path.dirname(path)), exist_ok=True)
            shutil.copy2(os.path.join(SOURCE, path), os.path.join(cls.pristine, path))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.scratch)

    def setUp(self):
        self.root = os.path.join(self.scratch, self.id().rsplit(".", 1)[-1])
        shutil.copytree(self.pristine, self.root)

    def tearDown(self):
        shutil.rmtree(self.root)

    def plant(self, path, line):
        """Appends `line` to the copy's `path`; its line number."""
        full = os.path.join(self.root, path)
        with open(full, encoding="utf-8") as f:
            text = f.read()
        if not text.endswith("\n"):
            text += "\n"
        with open(full, "w", encoding="utf-8") as f:
            f.write(text + line + "\n")
        return text.count("\n") + 1

    def run_script(self):
        done = subprocess.run([sys.executable, SCRIPT, "--root", self.root], capture_output=True, text=True,
                              timeout=120)
        return done.returncode, done.stderr.splitlines()

    def assert_fails_with(self, *expected):
        """Exit 1, and for each expected (start, rule) a message that starts with `start` and names `rule`."""
        code, messages = self.run_script()
        self.assertEqual(code, 1, "\n".join(messages))
        for start, rule in expected:
            self.assertTrue(any(m.startswith(start) and rule in m for m in messages),
                            f"no message starting {start!r} naming {rule!r} in:\n" + "\n".join(messages))

    def test_the_unplanted_copy_passes(self):
        code, messages = self.run_script()
        self.assertEqual((code, messages), (0, []))

    def test_engine_includes_cpu_quoted(self):
        n = self.plant("engine/runtime/engine.cpp", '#include "cpu/backend/cpu_backend.h"')
        self.assert_fails_with((f'engine/runtime/engine.cpp:{n}: #include "cpu/backend/cpu_backend.h": ',
                                "rule engine-knows-no-backend"),
                               (f'engine/runtime/engine.cpp:{n}: #include "cpu/backend/cpu_backend.h": ',
                                "upward edge engine/runtime -> cpu/backend"))

    def test_engine_includes_cuda_in_angle_brackets(self):
        n = self.plant("engine/generation/generator.cpp", "#include <cuda/kernels/cuda_kernels.h>")
        self.assert_fails_with((f"engine/generation/generator.cpp:{n}: #include <cuda/kernels/cuda_kernels.h>: ",
                                "rule engine-knows-no-backend"))

    def test_a_system_header_in_angle_brackets_is_left_out(self):
        self.plant("engine/generation/generator.cpp", "#include <cuda_runtime.h>")
        self.assertEqual(self.run_script(), (0, []))

    def test_kernels_include_the_engine(self):
        n = self.plant("kernels/reference.cpp", '#include "engine/runtime/sampler.h"')
        self.assert_fails_with((f'kernels/reference.cpp:{n}: #include "engine/runtime/sampler.h": ',
                                "rule kernels-know-only-kernels"))

    def test_cpu_kernels_include_the_cpu_backend(self):
        n = self.plant("cpu/kernels/cpu_kernels.cpp", '#include "cpu/backend/huge_page_buffer.h"')
        self.assert_fails_with((f'cpu/kernels/cpu_kernels.cpp:{n}: #include "cpu/backend/huge_page_buffer.h": ',
                                "rule kernels-know-only-kernels"))

    def test_serving_includes_a_backend(self):
        n = self.plant("engine/serving/scheduler.cpp", '#include "cpu/backend/cpu_backend.h"')
        self.assert_fails_with((f'engine/serving/scheduler.cpp:{n}: #include "cpu/backend/cpu_backend.h": ',
                                "rule serving-knows-no-backend"))

    def test_an_include_down_the_layers_without_its_link(self):
        # Layer 8 may include engine/model (layer 2), but kvx_engine_benchmarks links kvx_cache and kvx_tokenizer
        # only: the model's objects would be missing at link time.
        n = self.plant("tools/bench/engine/bench_rewind.cpp", '#include "engine/model/model_config.h"')
        code, messages = self.run_script()
        self.assertEqual(code, 1)
        self.assertIn(f'tools/bench/engine/bench_rewind.cpp:{n}: #include "engine/model/model_config.h": include '
                      "without a link: kvx_engine_benchmarks (tools/bench/CMakeLists.txt) links no target that "
                      "builds engine/model/model_config.h (kvx_model)", messages)

    def test_a_link_dropped_under_its_includes(self):
        cmake = os.path.join(self.root, "engine/tokenizer/CMakeLists.txt")
        with open(cmake, encoding="utf-8") as f:
            text = f.read()
        self.assertIn("PUBLIC kvx_files ", text)
        with open(cmake, "w", encoding="utf-8") as f:
            f.write(text.replace("PUBLIC kvx_files ", "PUBLIC "))
        self.assert_fails_with(("engine/tokenizer/", "include without a link: kvx_tokenizer"))

    def test_a_cmake_link_up_the_layers(self):
        n = self.plant("engine/model/CMakeLists.txt", "target_link_libraries(kvx_model PRIVATE kvx_runtime)")
        self.assert_fails_with((f"engine/model/CMakeLists.txt:{n}: target_link_libraries(kvx_model ... kvx_runtime): ",
                                "upward link engine/model -> engine/runtime (layer 2 -> layer 3)"))

    def test_a_cmake_link_across_a_forbidden_edge(self):
        n = self.plant("engine/runtime/CMakeLists.txt", "target_link_libraries(kvx_runtime PRIVATE\n  kvx_cpu_backend)")
        self.assert_fails_with((f"engine/runtime/CMakeLists.txt:{n}: target_link_libraries(kvx_runtime ... "
                                "kvx_cpu_backend): ", "rule engine-knows-no-backend"))

    def test_a_python_import_up_the_layers_relative(self):
        n = self.plant("tools/kvx_tools/convert/graph/index.py", "from ...bench import e2e_tables  # noqa")
        self.assert_fails_with((f"tools/kvx_tools/convert/graph/index.py:{n}: from ...bench import e2e_tables: ",
                                "upward import convert.graph -> bench"),
                               (f"tools/kvx_tools/convert/graph/index.py:{n}: ", "rule converter-stands-alone"))

    def test_a_python_import_of_the_entry_point_absolute(self):
        n = self.plant("tools/kvx_tools/convert/tokenizer/bpe.py", "import kvx_tools.convert.__main__  # noqa")
        self.assert_fails_with((f"tools/kvx_tools/convert/tokenizer/bpe.py:{n}: import kvx_tools.convert.__main__: ",
                                "rule entry-point-imported-by-none"),
                               (f"tools/kvx_tools/convert/tokenizer/bpe.py:{n}: ",
                                "upward import convert.tokenizer -> convert.cli"))

    def test_a_python_import_sideways_in_a_function(self):
        n = self.plant("tools/kvx_tools/export/onnx_save.py",
                       "def _late():\n    from kvx_tools.convert.write import model_dir  # noqa")
        self.assert_fails_with((f"tools/kvx_tools/export/onnx_save.py:{n + 1}: from kvx_tools.convert.write import "
                                "model_dir: ", "sideways import export -> convert.write (layer 3 -> layer 3)"))


if __name__ == "__main__":
    unittest.main()
