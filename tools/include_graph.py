#!/usr/bin/env python3
"""The include graph of kvx's C++ and CUDA sources by folder, checked against the layers below.

  python3 tools/include_graph.py [--root DIR] [--dot]

Prints every edge between folders with the number of #include lines behind it, then checks, and exits 1
naming each offending #include (file:line) when one fails:
  - every include goes down the layers: a folder includes only folders of lower layers (never its own layer's
    other folders, never a layer above);
  - no include cycle between components (x.h with x.cpp, x.cu and x.inc of the same folder), within a folder
    or across folders;
  - every quoted include names a file that exists, and every folder with sources is in a layer.
Test files (*_test.cpp, test_*.{h,cpp}) sit beside what they check but belong to the top layer: they may
include anything, and only other tests include them. Only the standard library; ctest runs it (include_graph).
"""
import argparse
import os
import re
import sys
from collections import defaultdict

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
SOURCE_EXTENSIONS = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh", ".inc")
SKIPPED_DIRS = {"build", "testdata", "docs", "bench", "scripts"}  # no C++ sources of kvx's own
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
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


def source_files(root):
    for top, dirs, files in os.walk(root):
        rel_top = os.path.relpath(top, root)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not d.startswith("build") and d != "__pycache__"
                         and not (rel_top == "." and d in SKIPPED_DIRS))
        for name in sorted(files):
            if name.endswith(SOURCE_EXTENSIONS):
                yield os.path.normpath(os.path.join(rel_top, name))


def includes(root, path):
    """(line number, included file relative to root or None when it does not exist, as written)."""
    with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            written = m.group(1)
            for base in (os.path.dirname(path), ""):  # beside the file first, then from the root
                candidate = os.path.normpath(os.path.join(base, written))
                if os.path.isfile(os.path.join(root, candidate)):
                    yield number, candidate, written
                    break
            else:
                yield number, None, written


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
    """(folder edges {(from, to): count}, problems [str])."""
    ranks = rank_of()
    edges = defaultdict(int)
    components = defaultdict(set)
    problems = []
    unplaced = set()
    for path in source_files(root):
        unit = unit_of(path)
        if unit not in ranks:
            unplaced.add(unit)
        for line, target, written in includes(root, path):
            where = f"{path}:{line}: #include \"{written}\""
            if target is None:
                problems.append(f"{where} names no file (beside it or from the root)")
                continue
            if component_of(target) != component_of(path):
                components[component_of(path)].add(component_of(target))
            to = unit_of(target)
            if to == unit:
                continue
            edges[(unit, to)] += 1
            if unit not in ranks or to not in ranks:
                continue
            if ranks[unit] == ranks[TESTS] and ranks[to] == ranks[TESTS]:
                continue
            if to == TESTS:
                problems.append(f"{where}: {unit} includes a test file")
            elif ranks[to] >= ranks[unit]:
                way = "sideways" if ranks[to] == ranks[unit] else "upward"
                problems.append(f"{where}: {way} edge {unit} -> {to} (layer {ranks[unit]} -> layer {ranks[to]})")
    for unit in sorted(unplaced):
        problems.append(f"folder {unit} is in no layer of tools/include_graph.py's LAYERS")
    folder_graph = defaultdict(set)
    for a, b in edges:
        folder_graph[a].add(b)
    for scc in cycles(folder_graph):
        problems.append("include cycle between folders: " + " <-> ".join(scc))
    for scc in cycles(components):
        problems.append("include cycle between components: " + " <-> ".join(scc))
    return dict(edges), problems


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
    if problems:
        for problem in problems:
            print(problem, file=sys.stderr)
        print(f"include_graph: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"include_graph: {len(edges)} folder edges, every one down the layers; no include cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
