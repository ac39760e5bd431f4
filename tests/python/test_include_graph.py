"""tools/include_graph.py on small trees made for each rule, so that the check ctest runs on the repository
(include_graph) is known to catch what it claims: upward and sideways includes, cycles between components
and between folders, includes of missing files or of tests, folders outside the layers, and includes without
the CMake link behind them (targets made in a foreach, includes under an #if). test_include_graph_planted.py
plants each kind of bad edge in a copy of the repository."""
import importlib.util
import os
import tempfile
import unittest

SCRIPT = os.path.join(os.environ["KVX_SOURCE_DIR"], "tools", "include_graph.py")
spec = importlib.util.spec_from_file_location("include_graph", SCRIPT)
include_graph = importlib.util.module_from_spec(spec)
spec.loader.exec_module(include_graph)


class IncludeGraphTest(unittest.TestCase):
    def problems(self, files):
        """include_graph's problems for a tree of {path: text}."""
        with tempfile.TemporaryDirectory() as root:
            for path, text in files.items():
                os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
                with open(os.path.join(root, path), "w", encoding="utf-8") as f:
                    f.write(text)
            return include_graph.analyse(root)

    def test_includes_down_the_layers_pass_and_are_counted(self):
        edges, problems = self.problems({
            "kernels/kernels.h": "#pragma once\n",
            "engine/cache/pool.h": '#include "kernels/kernels.h"\n',
            "engine/cache/pool.cpp": '#include "engine/cache/pool.h"\n#include "kernels/kernels.h"\n',
            "engine/runtime/engine.h": '#include "engine/cache/pool.h"\n',
            "tools/kvx/main.cpp": '#include "local.h"\n#include "engine/runtime/engine.h"\n',
            "tools/kvx/local.h": '#include <vector>\n',
        })
        self.assertEqual(problems, [])
        self.assertEqual(edges, {("engine/cache", "kernels"): 2, ("engine/runtime", "engine/cache"): 1,
                                 ("tools/kvx", "engine/runtime"): 1})

    def test_an_include_up_or_sideways_is_named_with_its_file_and_line(self):
        _, problems = self.problems({
            "kernels/kernels.h": '#pragma once\n#include "engine/cache/pool.h"\n',
            "engine/cache/pool.h": "#pragma once\n",
            "engine/model/model.h": "#pragma once\n",
            "engine/tokenizer/tokenizer.h": '#include "engine/model/model.h"\n',
        })
        self.assertIn('kernels/kernels.h:2: #include "engine/cache/pool.h": upward edge kernels -> engine/cache '
                      "(layer 0 -> layer 1)", problems)
        self.assertIn('engine/tokenizer/tokenizer.h:1: #include "engine/model/model.h": sideways edge '
                      "engine/tokenizer -> engine/model (layer 2 -> layer 2)", problems)

    def test_a_cycle_between_components_of_one_folder(self):
        _, problems = self.problems({
            "engine/generation/generator.h": "#pragma once\n",
            "engine/generation/generator.cpp": '#include "engine/generation/speculative.h"\n',
            "engine/generation/speculative.h": '#include "engine/generation/generator.h"\n',
        })
        self.assertEqual(problems, ["include cycle between components: engine/generation/generator <-> "
                                    "engine/generation/speculative"])

    def test_a_cycle_between_folders(self):
        _, problems = self.problems({
            "tools/bench/main.cpp": '#include "tools/bench/cuda/b.h"\n',
            "tools/bench/cuda/b.h": '#include "tools/bench/main.h"\n',
            "tools/bench/main.h": "#pragma once\n",
        })
        self.assertIn("include cycle between folders: tools/bench <-> tools/bench/cuda", problems)

    def test_tests_include_anything_and_nothing_else_includes_a_test(self):
        _, problems = self.problems({
            "engine/runtime/sampler.h": "#pragma once\n",
            "cuda/kernels/sampling_test.cpp": '#include "engine/runtime/sampler.h"\n#include "cuda/kernels/test_support.h"\n',
            "cuda/kernels/test_support.h": "#pragma once\n",
            "cuda/kernels/launch.h": '#include "cuda/kernels/test_support.h"\n',
        })
        self.assertEqual(problems, ['cuda/kernels/launch.h:1: #include "cuda/kernels/test_support.h": '
                                    "cuda/kernels includes a test file"])

    def test_a_missing_file_and_a_folder_outside_the_layers(self):
        _, problems = self.problems({
            "engine/cache/pool.h": '#include "engine/cache/gone.h"\n',
            "plugins/extra.cpp": "int x;\n",
        })
        self.assertIn('engine/cache/pool.h:1: #include "engine/cache/gone.h" names no file (beside it or from the '
                      "root)", problems)
        self.assertIn("folder plugins is in no layer of tools/include_graph.py's LAYERS", problems)

    def test_targets_made_in_a_foreach_and_from_variables_are_held_to_their_links(self):
        _, problems = self.problems({
            "engine/model/model.h": "#pragma once\n",
            "engine/model/model.cpp": '#include "engine/model/model.h"\n',
            "engine/model/CMakeLists.txt": "set(model_sources model.cpp)\n"
                                           "add_library(kvx_model STATIC ${model_sources})\n",
            "tests/fuzz/fuzz_a.cpp": '#include "engine/model/model.h"\n',
            "tests/fuzz/fuzz_b.cpp": '#include "engine/model/model.h"\n',
            "tests/fuzz/CMakeLists.txt": "set(names a  # the first\n  b)\nforeach(name IN LISTS names)\n"
                                         "  add_executable(fuzz_${name} fuzz_${name}.cpp)\nendforeach()\n"
                                         "target_link_libraries(fuzz_a PRIVATE kvx_model)\n",
        })
        self.assertEqual(problems, ['tests/fuzz/fuzz_b.cpp:1: #include "engine/model/model.h": include without a link: '
                                    "fuzz_b (tests/fuzz/CMakeLists.txt) links no target that builds "
                                    "engine/model/model.h (kvx_model)"])

    def test_an_include_under_an_if_needs_one_target_and_a_folder_no_target_builds_needs_none(self):
        files = {
            "kernels/kernels.h": "#pragma once\n",
            "cuda/backend/cuda_backend.h": "#pragma once\n",
            "cuda/backend/cuda_backend.cpp": '#include "cuda/backend/cuda_backend.h"\n',
            "cuda/backend/CMakeLists.txt": "add_library(kvx_cuda_backend STATIC cuda_backend.cpp)\n",
            "tests/traits_test.cpp": '#include "kernels/kernels.h"\n#ifdef ON_CUDA\n'
                                     '#include "cuda/backend/cuda_backend.h"\n#endif\n',
            "tests/CMakeLists.txt": "add_executable(traits traits_test.cpp)\n"
                                    "add_executable(cuda_traits traits_test.cpp)\n"
                                    "target_link_libraries(cuda_traits PRIVATE kvx_cuda_backend)\n",
        }
        self.assertEqual(self.problems(files)[1], [])
        files["tests/CMakeLists.txt"] = files["tests/CMakeLists.txt"].replace("cuda_traits PRIVATE", "traits PRIVATE")
        self.assertEqual(self.problems(files)[1], [])  # still one target that links it
        files["tests/CMakeLists.txt"] = "add_executable(traits traits_test.cpp)\n"
        self.assertEqual(self.problems(files)[1], ['tests/traits_test.cpp:3: #include "cuda/backend/cuda_backend.h": '
                                                   "include without a link: traits (tests/CMakeLists.txt) links no "
                                                   "target that builds cuda/backend/cuda_backend.h (kvx_cuda_backend)"])


if __name__ == "__main__":
    unittest.main()
