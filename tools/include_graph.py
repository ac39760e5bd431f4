#!/usr/bin/env python3
"""kvx's layer rules, checked: the include graph of the C++ and CUDA sources by folder, the CMake links between
their targets, and the imports between the Python tools' packages.

  python3 tools/include_graph.py [--root DIR] [--dot]

Prints every edge between folders with the number of #include lines behind it, then checks, and exits 1
naming each offence (file:line and the rule) when one fails:
  - every include ("..." or <...> that names a file of the tree) goes down LAYERS: a folder includes only
    folders of lower layers (never its own layer's other folders, never a layer above);
  - no include crosses a FORBIDDEN_EDGES rule, each with its reason (the engine knows no backend, the kernels
    know only the kernel contract, serving knows no backend);
  - no include cycle between components (x.h with x.cpp, x.cu and x.inc of the same folder), within a folder
    or across folders;
  - every quoted include names a file that exists, and every folder with sources is in a layer;
  - the CMake links (target_link_libraries of every CMakeLists.txt) go down the same layers and cross no
    forbidden edge, LINK_STAND_INS aside;
  - a file that includes another folder's file is built by a target that links, directly or through its
    libraries, the target that builds the included file (a folder that no target builds is headers only, and
    is left out);
  - the Python tools' imports (tools/kvx_tools, `import`, `from`, relative) go down PY_LAYERS and cross no
    PY_FORBIDDEN_EDGES rule.
Test files (*_test.cpp, test_*.{h,cpp}) sit beside what they check but belong to the top layer: they may
include anything, and only other tests include them. Only the standard library; ctest runs it (include_graph).
"""
import argparse
import os
import re
import sys
from collections import defaultdict
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from layer_rules.cmake_targets import read_targets, reachable  # noqa: E402
from layer_rules.python_imports import imports as python_imports  # noqa: E402

# Lowest first. A folder's sources may include the folders of lower layers only.
LAYERS = [
    ["kernels"],                                            # the kernel contract, fp16, errors, the reference
    ["cpu/kernels", "cuda/kernels", "engine/cache", "engine/files"],  # kernels; cache bookkeeping; file readers
    ["engine/model", "engine/tokenizer"],                   # config, weights, family traits; tokenizers
    ["engine/runtime"],                                     # Engine, Backend, DecoderPlan, sampler
    ["engine/generation", "cpu/backend", "cuda/backend"],   # decoding loops, load_tokenizer; the backends
    ["engine/serving"],                                     # continuous batching: scheduler, request streams
    ["tools/kvx/serve"],                                    # kvx serve's HTTP front: the OpenAI API
    ["tools/kvx", "tools/bench/support", "tools/cuda_emulation"],  # the command line, benchmark support
    ["tools/bench/cpu", "tools/bench/cuda", "tools/bench/engine"],  # benchmarks (and kvx_cuda_decode)
    ["tools/bench"],                                        # kvx-bench and kvx_read_bandwidth: the mains
    ["tests", "tests/fuzz", "tests/kernel_ops"],            # tests, wherever they sit; the fuzz targets; the ops harness
]
TESTS = "tests"


@dataclass
class ForbiddenEdge:
    """No edge from a folder under one of `sources` to a folder under one of `targets` or, when `only` is
    given, to a folder outside `only` and the source's own. Folders match a prefix at a '/' (or a '.' for
    the Python packages' units)."""
    name: str
    sources: tuple
    reason: str
    targets: tuple = ()
    only: tuple = ()

    def forbids(self, a, b):
        if not any(_under(a, s) for s in self.sources) or a == b:
            return False
        if self.only:
            return not any(_under(b, o) for o in self.only)
        return any(_under(b, t) for t in self.targets)


def _under(folder, prefix):
    return folder == prefix or folder.startswith(prefix + "/") or folder.startswith(prefix + ".")


# Edges the layers alone would allow, or that matter enough to be named with their reason. Checked on
# includes and on CMake links alike.
FORBIDDEN_EDGES = [
    ForbiddenEdge("engine-knows-no-backend", sources=("engine",), targets=("cpu", "cuda"),
                  reason="the engine reaches a backend only through engine/runtime/backend.h; tools/kvx picks one"),
    ForbiddenEdge("kernels-know-only-kernels", sources=("kernels", "cpu/kernels", "cuda/kernels"), only=("kernels",),
                  reason="kernels implement the kernel contract (kernels/) and know nothing above it, so that "
                         "every backend, benchmark and test can run them alone"),
    ForbiddenEdge("serving-knows-no-backend", sources=("engine/serving",), targets=("cpu/backend", "cuda/backend"),
                  reason="the scheduler drives an Engine whatever its backend; kvx serve chooses the backend"),
]
# Targets linked in place of a library from outside the tree, below whatever links them: their link edges
# are not held to the layers.
LINK_STAND_INS = {
    "kvx_cuda_emulated_runtime": "the CUDA runtime and cuBLAS emulated on the CPU, linked in place of libcudart",
}

# The Python tools: one package, its units lowest first. A unit is a name and the modules it holds:
# "x.*" is the package x and everything under it, "x" the module x alone; a module counts in the unit of
# its most specific pattern. A unit's modules may import one another; other units only of lower layers.
PY_PACKAGE = "tools/kvx_tools"
PY_LAYERS = [
    [("kvx_tools", ("kvx_tools", "kvx_tools.checkout", "kvx_tools.input_file"))],  # what every tool shares
    [("convert.base", ("kvx_tools.convert", "kvx_tools.convert.errors", "kvx_tools.convert.domains"))],
    # The converter's readers: the tokenizer files, and the ONNX graph with what recognises its parts (these
    # packages import one another, so they are one unit).
    [("convert.tokenizer", ("kvx_tools.convert.tokenizer.*",)),
     ("convert.graph", ("kvx_tools.convert.graph.*", "kvx_tools.convert.blocks.*", "kvx_tools.convert.families.*",
                        "kvx_tools.convert.exporters.*", "kvx_tools.convert.quantized.*"))],
    [("convert.write", ("kvx_tools.convert.write.*",)),                  # the model directory written
     ("export", ("kvx_tools.export.*",))],                               # checkpoints to ONNX
    [("convert.pipeline", ("kvx_tools.convert.pipeline",))],             # the converter, start to end
    [("convert.cli", ("kvx_tools.convert.__main__",))],                  # python -m kvx_tools.convert
    [("fixtures", ("kvx_tools.fixtures.*",)), ("bench", ("kvx_tools.bench.*",))],  # test fixtures; benchmarks
]
PY_FORBIDDEN_EDGES = [
    ForbiddenEdge("converter-stands-alone", sources=("convert",), targets=("export", "fixtures", "bench"),
                  reason="kvx convert runs the converter from share/kvx/python with the converter's requirements "
                         "only; the exporters, fixtures and benchmarks need more"),
    ForbiddenEdge("entry-point-imported-by-none", sources=("kvx_tools", "convert", "export", "fixtures", "bench"),
                  targets=("convert.cli",),
                  reason="__main__ is `python -m kvx_tools.convert`; code calls convert.pipeline instead"),
]

SOURCE_EXTENSIONS = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh", ".inc")
COMPILED_EXTENSIONS = (".cpp", ".cc", ".cu")
SKIPPED_DIRS = {"build", "testdata", "docs", "bench", "scripts"}  # no C++ sources of kvx's own
INCLUDE = re.compile(r'^\s*#\s*include\s+(?:"([^"]+)"|<([^>]+)>)')
CONDITIONAL = re.compile(r"^\s*#\s*(if|ifdef|ifndef|endif)\b")
TEST_FILE = re.compile(r"(_test\.(cpp|cc|cu)|^test_.*\.(h|hpp|cpp|cc))$")


def rank_of():
    return {folder: rank for rank, layer in enumerate(LAYERS) for folder in layer}


def unit_of(path):
    """The folder a source file counts in: its own, or the tests' for a test file."""
    folder, name = os.path.split(path)
    return TESTS if TEST_FILE.search(name) else folder


def component_of(path):
    """x.h, x.cpp, x.cu, x.inc of one folder are one component."""
    folder, name = os.path.split(path)
    return os.path.join(folder, name.split(".", 1)[0])


def walk(root):
    """Every file of the tree a rule reads, relative to root: build folders, hidden folders and folders with
    nothing of kvx's own left out."""
    for top, dirs, files in os.walk(root):
        rel_top = os.path.relpath(top, root)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not d.startswith("build") and d != "__pycache__"
                         and not (rel_top == "." and d in SKIPPED_DIRS))
        for name in sorted(files):
            yield os.path.normpath(os.path.join(rel_top, name))


def source_files(root):
    return [path for path in walk(root) if path.endswith(SOURCE_EXTENSIONS)]


def cmake_files(root):
    return [path for path in walk(root) if os.path.basename(path) == "CMakeLists.txt"]


def includes(root, path):
    """(line number, included file relative to root or None, as written, under an #if) for each #include.

    "x.h" is looked for beside the file, then from the root; a quoted include that names no file gives None.
    <x.h> is looked for from the root only (kvx's include directory); one that is not there is a system or
    third-party header, and is left out."""
    depth = 0  # of #if blocks: an include inside one is built by some configurations only
    with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            c = CONDITIONAL.match(line)
            if c:
                depth = max(0, depth + (-1 if c.group(1) == "endif" else 1))
                continue
            m = INCLUDE.match(line)
            if not m:
                continue
            quoted = m.group(1) is not None
            name = m.group(1) if quoted else m.group(2)
            written = f'"{name}"' if quoted else f"<{name}>"
            for base in ((os.path.dirname(path), "") if quoted else ("",)):
                candidate = os.path.normpath(os.path.join(base, name))
                if os.path.isfile(os.path.join(root, candidate)):
                    yield number, candidate, written, depth > 0
                    break
            else:
                if quoted:
                    yield number, None, written, depth > 0


def cycles(graph):
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                found.append(sorted(scc))

    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def analyse(root):
    """(folder edges {(from, to): count}, problems [str]): every rule of this file on the tree at root."""
    root = os.path.abspath(root)
    ranks = rank_of()
    edges = defaultdict(int)
    components = defaultdict(set)
    problems = []
    unplaced = set()
    include_lines = []  # (file, line, included file, as written, under an #if): for the links' check
    for path in source_files(root):
        unit = unit_of(path)
        if unit not in ranks:
            unplaced.add(unit)
        for line, target, written, conditional in includes(root, path):
            where = f"{path}:{line}: #include {written}"
            if target is None:
                problems.append(f"{where} names no file (beside it or from the root)")
                continue
            include_lines.append((path, line, target, written, conditional))
            if component_of(target) != component_of(path):
                components[component_of(path)].add(component_of(target))
            to = unit_of(target)
            if to == unit:
                continue
            edges[(unit, to)] += 1
            problems.extend(f"{where}: {p}" for p in edge_problems(unit, to, "edge", FORBIDDEN_EDGES, ranks))
    for unit in sorted(unplaced):
        problems.append(f"folder {unit} is in no layer of tools/include_graph.py's LAYERS")
    folder_graph = defaultdict(set)
    for a, b in edges:
        folder_graph[a].add(b)
    for scc in cycles(folder_graph):
        problems.append("include cycle between folders: " + " <-> ".join(scc))
    for scc in cycles(components):
        problems.append("include cycle between components: " + " <-> ".join(scc))
    problems.extend(link_problems(root, include_lines))
    problems.extend(python_problems(root))
    return dict(edges), problems


def edge_problems(a, b, kind, forbidden, ranks):
    """What is wrong with an edge from unit a to unit b (an include, a link or an import) under the layers
    `ranks` and the `forbidden` rules: each a message without its place."""
    if b == TESTS and a in ranks and ranks[a] != ranks[TESTS]:
        return [f"{a} includes a test file"]  # whatever else the edge breaks: that alone says what to do
    found = []
    if a in ranks and b in ranks and not (ranks[a] == ranks[b] == ranks.get(TESTS)):
        if ranks[b] >= ranks[a]:
            way = "sideways" if ranks[b] == ranks[a] else "upward"
            found.append(f"{way} {kind} {a} -> {b} (layer {ranks[a]} -> layer {ranks[b]})")
    for rule in forbidden:
        if rule.forbids(a, b):
            found.append(f"forbidden {kind} {a} -> {b} (rule {rule.name}: {rule.reason})")
    return found


def link_problems(root, include_lines):
    """The CMake links against the layers and the forbidden edges, and the includes against the links."""
    targets, links = read_targets(root, cmake_files(root))
    ranks = rank_of()

    def main_folder(target):
        """The highest of the folders whose sources a target builds (an INTERFACE library: its own)."""
        folders = {unit_of(source) for source in target.sources} or {target.directory}
        return max(sorted(folders), key=lambda f: ranks.get(f, -1))

    problems = []
    for link in links:
        if link.target not in targets or link.library not in targets:
            continue  # a library from outside the tree (CUDA::cudart, OpenMP) or a name CMake alone knows
        if link.target in LINK_STAND_INS or link.library in LINK_STAND_INS:
            continue
        a, b = main_folder(targets[link.target]), main_folder(targets[link.library])
        if a == b or a not in ranks or b not in ranks:
            continue  # within a folder, or a target of build settings (kvx_warnings) rather than code
        where = f"{link.cmake_file}:{link.line}: target_link_libraries({link.target} ... {link.library})"
        problems.extend(f"{where}: {p}" for p in edge_problems(a, b, "link", FORBIDDEN_EDGES, ranks))

    # Which targets build a file: a source, the targets that compile it; a header, those that compile its
    # component's sources, else its folder's INTERFACE library, else every target with sources in its folder.
    compiled_by, component_targets, folder_targets, interface_targets = (defaultdict(set) for _ in range(4))
    for target in targets.values():
        if target.kind == "INTERFACE":
            interface_targets[target.directory].add(target.name)
        for source in target.sources:
            if source.endswith(COMPILED_EXTENSIONS):
                compiled_by[source].add(target.name)
                if unit_of(source) == os.path.dirname(source):  # a test beside a library builds none of it
                    component_targets[component_of(source)].add(target.name)
                    folder_targets[os.path.dirname(source)].add(target.name)

    def builders(path):
        if path.endswith(COMPILED_EXTENSIONS):
            return compiled_by.get(path, set())
        folder = os.path.dirname(path)
        return (component_targets.get(component_of(path)) or interface_targets.get(folder)
                or folder_targets.get(folder, set()))

    reach = reachable(targets, links)
    for path, line, included, written, conditional in include_lines:
        if os.path.dirname(path) == os.path.dirname(included):
            continue
        includers, owners = builders(path), builders(included)
        if not includers or not owners:
            continue  # built by no target of the tree, or a folder of headers only
        missing = sorted(t for t in includers if t not in owners and not (reach.get(t, set()) & owners))
        # A source must build in every target that compiles it; a header, or an include under an #if (which a
        # target's definitions may leave out), needs one target that links what it includes.
        every = path.endswith(COMPILED_EXTENSIONS) and not conditional
        if missing and (every or len(missing) == len(includers)):
            for t in missing:
                problems.append(f"{path}:{line}: #include {written}: include without a link: {t} "
                                f"({targets[t].cmake_file}) links no target that builds {included} "
                                f"({' or '.join(sorted(owners))})")
    return problems


def python_units():
    """[(unit, patterns, rank)] of PY_LAYERS."""
    return [(unit, patterns, rank) for rank, layer in enumerate(PY_LAYERS) for unit, patterns in layer]


def python_unit_of(module, units):
    """The unit whose most specific pattern holds the module, or None."""
    best, best_length = None, -1
    for unit, patterns, _ in units:
        for pattern in patterns:
            base = pattern[:-2] if pattern.endswith(".*") else pattern
            holds = module == base or (pattern.endswith(".*") and module.startswith(base + "."))
            length = len(base) + (0 if pattern.endswith(".*") else 1)  # an exact name beats its package's ".*"
            if holds and length > best_length:
                best, best_length = unit, length
    return best


def python_analyse(root):
    """(unit edges {(from, to): count}, problems [str]) of the Python tools' imports."""
    root = os.path.abspath(root)
    if not os.path.isdir(os.path.join(root, PY_PACKAGE)):
        return {}, []
    units = python_units()
    ranks = {unit: rank for unit, _, rank in units}
    edges, problems, unplaced = defaultdict(int), [], {}
    for imp in python_imports(root, PY_PACKAGE):
        a, b = python_unit_of(imp.module, units), python_unit_of(imp.imported, units)
        for module, unit, path in ((imp.module, a, imp.path), (imp.imported, b, None)):
            if unit is None:
                unplaced.setdefault(module, path)
        if a is None or b is None or a == b:
            continue
        edges[(a, b)] += 1
        where = f"{imp.path}:{imp.line}: {imp.written}"
        problems.extend(f"{where}: {p}" for p in edge_problems(a, b, "import", PY_FORBIDDEN_EDGES, ranks))
    for module in sorted(unplaced):
        problems.append(f"module {module} is in no unit of tools/include_graph.py's PY_LAYERS")
    return dict(edges), problems


def python_problems(root):
    return python_analyse(root)[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        help="the repository (default: the one this script is in)")
    parser.add_argument("--dot", action="store_true", help="print the folder graph in Graphviz's dot language")
    args = parser.parse_args()
    edges, problems = analyse(args.root)
    ranks = rank_of()
    order = sorted(edges, key=lambda e: (-ranks.get(e[0], len(LAYERS)), e[0], -ranks.get(e[1], 0), e[1]))
    if args.dot:
        print("digraph includes {\n  rankdir=BT;")
        for a, b in order:
            print(f'  "{a}" -> "{b}" [label={edges[(a, b)]}];')
        print("}")
    else:
        print("include graph by folder (layer: folder -> folder, #include lines):")
        for a, b in order:
            print(f"  {ranks.get(a, '?')}: {a:<20} -> {b:<20} {edges[(a, b)]:>4}")
        py_edges, _ = python_analyse(args.root)
        py_ranks = {unit: rank for unit, _, rank in python_units()}
        print(f"import graph of {PY_PACKAGE} by unit (layer: unit -> unit, imports):")
        for a, b in sorted(py_edges, key=lambda e: (-py_ranks[e[0]], e[0], -py_ranks[e[1]], e[1])):
            print(f"  {py_ranks[a]}: {a:<20} -> {b:<20} {py_edges[(a, b)]:>4}")
    if problems:
        for problem in problems:
            print(problem, file=sys.stderr)
        print(f"include_graph: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"include_graph: {len(edges)} folder edges, every one down the layers, none forbidden, each backed by a "
          "CMake link; no include cycle; the CMake links and the Python imports down their layers too")
    return 0


if __name__ == "__main__":
    sys.exit(main())
