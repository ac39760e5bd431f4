"""The targets of a tree's CMakeLists.txt files and the links between them, read without running CMake.

Enough of CMake's language for kvx's own files: commands and their arguments (quoted or not, nested
parentheses, # comments), set() and list(APPEND) variables of the same file, foreach() over items or lists
(its body run once per item), and ${PROJECT_SOURCE_DIR} / ${CMAKE_CURRENT_SOURCE_DIR}. Every branch of an
if() counts: a link made only in the CUDA emulation build is still a link. A function's body is not run, so
what a function adds is not seen. Only the standard library.
"""
import os
import re
from dataclasses import dataclass, field

TARGET_KINDS = {"STATIC", "SHARED", "MODULE", "OBJECT", "INTERFACE"}
SOURCE_EXTENSIONS = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh", ".inc")
LINK_KEYWORDS = {"PUBLIC", "PRIVATE", "INTERFACE", "LINK_PUBLIC", "LINK_PRIVATE", "LINK_INTERFACE_LIBRARIES"}
ARGUMENT = re.compile(r'"((?:\\.|[^"\\])*)"|([^\s"]+)')
VARIABLE = re.compile(r"\$\{([A-Za-z0-9_]+)\}")


@dataclass
class Target:
    name: str
    kind: str            # STATIC, OBJECT, INTERFACE, ..., or EXECUTABLE
    cmake_file: str      # the CMakeLists.txt that declares it, relative to the root
    line: int
    sources: set = field(default_factory=set)  # files of the tree, relative to the root

    @property
    def directory(self):
        return os.path.dirname(self.cmake_file)


@dataclass
class Link:
    target: str
    library: str
    cmake_file: str
    line: int


def commands(text):
    """(line, command name in lower case, [arguments]) for each command of a CMake file."""
    i, line, n = 0, 1, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c == "#":
            bracket = re.match(r"#\[(=*)\[", text[i:])
            close = text.find("]" + bracket.group(1) + "]", i) if bracket else text.find("\n", i)
            close = n if close == -1 else close
            line += text.count("\n", i, close)
            i = close if not bracket else close + len(bracket.group(1)) + 2
        elif c.isalpha() or c == "_":
            m = re.match(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(", text[i:])
            if not m:
                i += 1
                continue
            start_line, j, depth, quoted = line, i + m.end(), 1, False
            while j < n and depth:
                ch = text[j]
                if ch == "\\" and quoted:
                    j += 1
                elif ch == '"':
                    quoted = not quoted
                elif not quoted and ch == "(":
                    depth += 1
                elif not quoted and ch == ")":
                    depth -= 1
                elif not quoted and ch == "#":  # a comment inside the arguments
                    j = text.find("\n", j) - 1 if text.find("\n", j) != -1 else n
                j += 1
            body = text[i + m.end():j - 1]
            body = re.sub(r"(?m)#[^\n\"]*$", "", body)
            line += text.count("\n", i, j)
            args = [m.group(1) if m.group(1) is not None else m.group(2)
                    for m in ARGUMENT.finditer(body.replace("(", " ").replace(")", " "))]
            yield start_line, m.group(1).lower(), args
            i = j
        else:
            i += 1


def _expand(arg, variables):
    for _ in range(4):  # ${a_${b}} at most a few levels deep
        new = VARIABLE.sub(lambda m: " ".join(variables[m.group(1)]) if m.group(1) in variables else m.group(0), arg)
        if new == arg:
            break
        arg = new
    return arg


def _values(args, variables):
    """Arguments with their variables expanded; a list variable spreads into several values."""
    out = []
    for a in args:
        expanded = _expand(a, variables)
        out.extend(expanded.split() if expanded != a and "${" not in expanded else [expanded])
    return out


def _source_path(root, directory, value):
    if "${" in value or "$<" in value or not value.endswith(SOURCE_EXTENSIONS):
        return None
    path = os.path.normpath(value if os.path.isabs(value) else os.path.join(root, directory, value))
    rel = os.path.relpath(path, root)
    if rel.startswith("..") or not os.path.isfile(path):
        return None
    return rel


class _Reader:
    def __init__(self, root):
        self.root = root
        self.targets = {}
        self.links = []

    def run(self, cmake_file, cmds, variables):
        directory = os.path.dirname(cmake_file)
        i = 0
        while i < len(cmds):
            line, name, args = cmds[i]
            if name in ("foreach", "function", "macro"):
                end = self._block_end(cmds, i, name)
                if name == "foreach" and args:
                    for item in self._items(args, variables):
                        self.run(cmake_file, cmds[i + 1:end], {**variables, args[0]: [item]})
                i = end + 1
                continue
            values = _values(args, variables)
            if name == "set" and values:
                cut = [k for k, v in enumerate(values) if v in ("CACHE", "PARENT_SCOPE")]
                variables[values[0]] = values[1:cut[0] if cut else None]
            elif name == "list" and len(values) >= 2 and values[0] == "APPEND":
                variables[values[1]] = variables.get(values[1], []) + values[2:]
            elif name in ("add_library", "add_executable") and values:
                self._add_target(cmake_file, line, name, values)
            elif name == "target_sources" and values and values[0] in self.targets:
                self._add_sources(self.targets[values[0]], directory, values[1:])
            elif name == "target_link_libraries" and values:
                for library in values[1:]:
                    if library not in LINK_KEYWORDS and not library.startswith("$<"):
                        self.links.append(Link(values[0], library, cmake_file, line))
            i += 1

    @staticmethod
    def _block_end(cmds, i, name):
        depth = 0
        for k in range(i, len(cmds)):
            if cmds[k][1] == name:
                depth += 1
            elif cmds[k][1] == "end" + name:
                depth -= 1
                if depth == 0:
                    return k
        return len(cmds) - 1

    @staticmethod
    def _items(args, variables):
        rest = args[1:]
        if rest[:2] == ["IN", "LISTS"]:
            return [v for name in rest[2:] for v in variables.get(name, [])]
        if rest[:2] == ["IN", "ITEMS"]:
            rest = rest[2:]
        elif rest[:1] == ["RANGE"]:
            return []
        return _values(rest, variables)

    def _add_target(self, cmake_file, line, command, values):
        name, rest = values[0], values[1:]
        if "${" in name or any(v in ("IMPORTED", "ALIAS") for v in rest):
            return
        kind = "EXECUTABLE"
        if command == "add_library":
            kind = rest[0] if rest and rest[0] in TARGET_KINDS else "STATIC"
        target = self.targets.setdefault(name, Target(name, kind, cmake_file, line))
        self._add_sources(target, os.path.dirname(cmake_file), rest)

    def _add_sources(self, target, directory, values):
        for v in values:
            path = _source_path(self.root, directory, v)
            if path:
                target.sources.add(path)


def read_targets(root, cmake_files):
    """({name: Target}, [Link]) of the given CMakeLists.txt files (paths relative to root)."""
    reader = _Reader(root)
    for cmake_file in cmake_files:
        with open(os.path.join(root, cmake_file), encoding="utf-8", errors="replace") as f:
            cmds = list(commands(f.read()))
        directory = os.path.join(root, os.path.dirname(cmake_file))
        variables = {"PROJECT_SOURCE_DIR": [root], "CMAKE_SOURCE_DIR": [root],
                     "CMAKE_CURRENT_SOURCE_DIR": [os.path.normpath(directory)],
                     "CMAKE_CURRENT_LIST_DIR": [os.path.normpath(directory)]}
        reader.run(cmake_file, cmds, variables)
    return reader.targets, reader.links


def reachable(targets, links):
    """{target: every target it links, directly or through the libraries it links}."""
    direct = {}
    for link in links:
        if link.library in targets:
            direct.setdefault(link.target, set()).add(link.library)
    closure = {}
    for name in targets:
        seen, todo = set(), list(direct.get(name, ()))
        while todo:
            t = todo.pop()
            if t not in seen:
                seen.add(t)
                todo.extend(direct.get(t, ()))
        closure[name] = seen
    return closure
