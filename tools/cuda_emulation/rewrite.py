# Copies a .cu with its <<<...>>> launches (the one thing C++ cannot parse) turned into emu_launch calls:
#   kernel<T><<<grid, block, smem, stream>>>(args);
#     ->  emu_launch(&kernel<T>, [=] { kernel<T>(args); }, grid, block, smem, stream);
# (the kernel's address names it for cudaFuncSetAttribute's per-kernel limits; a launch that deduces a kernel
# template's arguments has none to take, and passes emu_deduced_kernel, which has the default limits).
# Everything else is the file verbatim, so the emulated kernels are the source nvcc compiles.
import os, re, sys
src, dst = sys.argv[1], sys.argv[2]
s = open(src).read()
# Kernel templates: a launch that deduces their arguments names no function whose address could be taken.
templates = set(re.findall(r'template\s*<[^{};]*>\s*__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)', s))
out, pos, n = [], 0, 0
pat = re.compile(r'([A-Za-z_]\w*(?:<[^<>;]*>)?)<<<')
while True:
    m = pat.search(s, pos)
    if not m: break
    cfg_end = s.index('>>>(', m.end())
    cfg = s[m.end():cfg_end]
    i, depth = cfg_end + 4, 1
    while depth:
        depth += {'(': 1, ')': -1}.get(s[i], 0); i += 1
    args = s[cfg_end + 4:i - 1]
    kernel = m.group(1)
    address = 'emu_deduced_kernel' if kernel in templates else '&' + kernel
    out.append(s[pos:m.start()] + f'emu_launch({address}, [=] {{ {kernel}({args}); }}, {cfg})')
    pos, n = i, n + 1
out.append(s[pos:])
body = ''.join(out)
# Dynamic shared memory: `extern __shared__ [__align__(N)] T name[];` becomes the block's emulated buffer.
body, n_smem = re.subn(r'extern\s+__shared__\s+(?:__align__\(\d+\)\s+)?([\w:]+(?:\s+[\w:]+)*?)\s+(\w+)\[\];',
                       r'\1* \2 = reinterpret_cast<\1*>(emu_smem());', body)
os.makedirs(os.path.dirname(os.path.abspath(dst)), exist_ok=True)
open(dst, 'w').write(f'#line 1 "{src}"\n' + body)
print(f'{src}: {n} launches, {n_smem} dynamic shared arrays rewritten', file=sys.stderr)
