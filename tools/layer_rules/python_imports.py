"""The imports between the modules of a Python package in a tree: `import x`, `from x import y` and relative
imports, wherever they sit in a file (a function's lazy import counts), each resolved to the package's own
module it names. Imports of anything outside the package are left out. Only the standard library.
"""
import ast
import os
from dataclasses import dataclass


@dataclass
class Import:
    path: str      # the importing file, relative to the root
    line: int
    written: str   # the statement as written, e.g. "from ..graph import index"
    module: str    # the importing module, e.g. "kvx_tools.convert.pipeline"
    imported: str  # the package's module it names, e.g. "kvx_tools.convert.graph.index"


def module_files(root, package_dir):
    """{module name: path relative to root} of every .py file under package_dir (e.g. tools/kvx_tools)."""
    parent = os.path.dirname(package_dir)
    found = {}
    for top, dirs, files in os.walk(os.path.join(root, package_dir)):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
        for name in sorted(files):
            if name.endswith(".py"):
                rel = os.path.relpath(os.path.join(top, name), os.path.join(root, parent))
                parts = rel[:-3].split(os.sep)
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                found[".".join(parts)] = os.path.normpath(os.path.join(parent, rel))
    return found


def _resolve(name, modules):
    """The longest prefix of the dotted `name` that is one of `modules`, or None."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def imports(root, package_dir):
    """Every import inside the package of a module of the package."""
    modules = module_files(root, package_dir)
    package = os.path.basename(package_dir)
    found = []
    for module, path in sorted(modules.items()):
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            try:
                tree = ast.parse(f.read(), filename=path)
            except SyntaxError as e:
                raise SystemExit(f"{path}:{e.lineno}: cannot parse: {e.msg}")
        is_package = path.endswith("__init__.py")
        here = module if is_package else module.rpartition(".")[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                written = "import " + ", ".join(a.name for a in node.names)
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                dots = "." * node.level
                written = f"from {dots}{node.module or ''} import " + ", ".join(a.name for a in node.names)
                if node.level:
                    base = here.split(".")
                    base = base[:len(base) - (node.level - 1)] if node.level > 1 else base
                    base = ".".join(base + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                names = [f"{base}.{a.name}" for a in node.names]  # a submodule, or a name in `base`
            else:
                continue
            for name in names:
                if name.split(".")[0] != package:
                    continue
                imported = _resolve(name, modules)
                if imported and imported != module:
                    found.append(Import(path, node.lineno, written, module, imported))
    return found
