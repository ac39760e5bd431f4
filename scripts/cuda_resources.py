#!/usr/bin/env python3
"""Per-kernel resources of cuda/kernels/*.cu for sm_90, from ptxas (nvcc -Xptxas -v), with no GPU needed.

  scripts/cuda_resources.py --write     # the table in docs/cuda.md and the baseline cuda/kernels/resource_baseline.json
  scripts/cuda_resources.py --check     # exit 1 if a kernel spills or has a stack frame where the baseline has none

Registers, spill stores/loads, stack frame and static shared memory per kernel (entry function), compiled as the
Release build compiles them (-O3 -DNDEBUG, sm_90 machine code). The occupancy column is what registers alone
allow on an H100 (65,536 registers and 64 warps per SM, registers given to a warp in units of 256): the bound
a register increase moves; shared memory and the block size can lower it further. A spill or a stack frame
means local memory, which the emulation cannot see and which costs bandwidth on the GPU: --check (ctest
cuda_resources, wherever nvcc is) refuses it in any kernel whose baseline had none. Only the standard library
and binutils' c++filt.
"""
import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERNELS = os.path.join(ROOT, "cuda", "kernels")
BASELINE = os.path.join(KERNELS, "resource_baseline.json")
DOC = os.path.join(ROOT, "docs", "cuda.md")
BEGIN, END = "<!-- cuda_resources.py: begin -->", "<!-- cuda_resources.py: end -->"

REGS_PER_SM, MAX_WARPS_PER_SM, REG_UNIT = 65536, 64, 256

ENTRY = re.compile(r"Compiling entry function '(\w+)' for 'sm_\d+'")
FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
USED = re.compile(r"Used (\d+) registers(?:.*?, (\d+) bytes smem)?")


def compile_one(nvcc, cu, out_dir):
    """ptxas's report for one .cu: {mangled name: figures}."""
    # Device code only (-cubin): ptxas reports the same figures, and the host side's compile, which the report
    # does not need, was half of each file's time.
    obj = os.path.join(out_dir, os.path.basename(cu) + ".cubin")
    cmd = [nvcc, "-O3", "-DNDEBUG", "-std=c++20", "--generate-code=arch=compute_90,code=sm_90", "-Xptxas", "-v",
           "-I", ROOT, "-cubin", cu, "-o", obj]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"cuda_resources: nvcc failed on {cu}:\n{proc.stderr}")
    kernels, current = {}, None
    for line in proc.stderr.splitlines():
        if m := ENTRY.search(line):
            current = m.group(1)
            kernels[current] = {"file": os.path.basename(cu)}
        elif current and (m := FRAME.search(line)):
            kernels[current].update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        elif current and (m := USED.search(line)):
            kernels[current].update(registers=int(m.group(1)), smem=int(m.group(2) or 0))
    for name, k in kernels.items():
        if not {"stack", "registers"} <= k.keys():
            sys.exit(f"cuda_resources: ptxas's report for {name} in {cu} was not understood:\n{proc.stderr}")
    return kernels


def demangle(names):
    proc = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True)
    return proc.stdout.splitlines()


def measure(nvcc, jobs):
    sources = sorted(os.path.join(KERNELS, f) for f in os.listdir(KERNELS) if f.endswith(".cu"))
    with tempfile.TemporaryDirectory() as tmp, concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        reports = list(pool.map(lambda cu: compile_one(nvcc, cu, tmp), sources))
    mangled = {name: k for report in reports for name, k in report.items()}
    names = list(mangled)
    return {pretty: mangled[name] for pretty, name in sorted(zip(demangle(names), names))}


def warps_by_registers(registers):
    per_warp = -(-registers * 32 // REG_UNIT) * REG_UNIT
    return min(MAX_WARPS_PER_SM, REGS_PER_SM // per_warp)


def table(kernels):
    rows = ["| kernel | file | registers | spill stores / loads (bytes) | stack (bytes) | static smem (bytes) | "
            "warps per SM by registers (of 64) |",
            "|---|---|---|---|---|---|---|"]
    for name, k in kernels.items():
        short = name.replace("kvx::cuda::(anonymous namespace)::", "").removeprefix("void ")
        rows.append(f"| `{short}` | {k['file']} | {k['registers']} | {k['spill_stores']} / {k['spill_loads']} | "
                    f"{k['stack']} | {k['smem']} | {warps_by_registers(k['registers'])} |")
    return "\n".join(rows)


def write(kernels, nvcc):
    with open(BASELINE, "w") as f:
        json.dump(kernels, f, indent=1, sort_keys=True)
        f.write("\n")
    version = re.search(r"release [\d.]+, V[\d.]+",
                        subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout).group(0)
    block = (f"{BEGIN}\nWritten by `scripts/cuda_resources.py --write` (nvcc {version}, sm_90, -O3; kernels of\n"
             f"`kvx::cuda::(anonymous namespace)`):\n\n{table(kernels)}\n{END}")
    doc = open(DOC).read()
    if BEGIN in doc:
        doc = doc[:doc.index(BEGIN)] + block + doc[doc.index(END) + len(END):]
    else:
        sys.exit(f"cuda_resources: {DOC} has no {BEGIN} ... {END} section to fill")
    open(DOC, "w").write(doc)


def check(kernels):
    baseline = json.load(open(BASELINE))
    failures = []
    for name, k in kernels.items():
        was = baseline.get(name, {"stack": 0, "spill_stores": 0, "spill_loads": 0})
        for field in ("stack", "spill_stores", "spill_loads"):
            if k[field] > 0 and was.get(field, 0) == 0:
                failures.append(f"{name}: {field} {k[field]} bytes, none in the baseline")
        if name in baseline and k["registers"] != baseline[name]["registers"]:
            print(f"note: {name}: {baseline[name]['registers']} -> {k['registers']} registers")
    for line in failures:
        print("FAIL " + line)
    print(f"{len(kernels)} kernels, {len(failures)} with new local memory (spills or a stack frame)")
    return 1 if failures else 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="write docs/cuda.md's table and the baseline")
    mode.add_argument("--check", action="store_true", help="fail on new spills or stack frames")
    p.add_argument("--nvcc", default=os.environ.get("NVCC", "nvcc"))
    p.add_argument("--jobs", type=int, default=2)
    args = p.parse_args()
    kernels = measure(args.nvcc, args.jobs)
    if not kernels:
        sys.exit("cuda_resources: ptxas reported no kernel")
    if args.write:
        write(kernels, args.nvcc)
        print(f"{len(kernels)} kernels written to {DOC} and {BASELINE}")
        return 0
    return check(kernels)


if __name__ == "__main__":
    sys.exit(main())
