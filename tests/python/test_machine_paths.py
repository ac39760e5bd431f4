"""No tracked file under testdata/, bench/, docs/, scripts/ or tools/ names a folder of one machine: a path
under /work/ or /home/ (a venv, a checkout, a model cache) means nothing on a clean clone, and a result or a
how-to that carries one tells the reader to use a folder they do not have. Scripts take such paths from an
argument or the environment, and result files record paths relative to the checkout (kvx_tools.checkout.
recorded_path). No allowlist: nothing in those folders needs to name one. Only the standard library and git."""
import os
import re
import subprocess
import tempfile
import unittest

SOURCE = os.environ["KVX_SOURCE_DIR"]
FOLDERS = ("testdata", "bench", "docs", "scripts", "tools")
# An absolute path's start: not inside a URL or a longer path (https://host/home/... is not a machine's folder).
MACHINE_PATH = re.compile(rb"(?<![\w.:/~-])/(?:work|home)/")


def tracked_files(root):
    """The files git tracks under FOLDERS, relative to root."""
    out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--", *FOLDERS], capture_output=True, check=True)
    return [name for name in out.stdout.decode().split("\0") if name]


def machine_paths(root, files):
    """'file:line: text' for each line of a text file that names a machine path; binary files are skipped."""
    found = []
    for name in files:
        path = os.path.join(root, name)
        if not os.path.isfile(path) or os.path.islink(path):
            continue
        with open(path, "rb") as f:
            data = f.read()
        if b"\0" in data[:8192]:
            continue  # a binary file (an .npy, an .onnx): not text anyone reads or runs
        for number, line in enumerate(data.splitlines(), 1):
            if MACHINE_PATH.search(line):
                found.append(f"{name}:{number}: {line.decode(errors='replace').strip()[:160]}")
    return found


class MachinePathsTest(unittest.TestCase):
    def test_the_tree_names_no_machine_path(self):
        files = tracked_files(SOURCE)
        self.assertTrue(any(f.startswith("docs/") for f in files), "git ls-files found no docs/: wrong root?")
        found = machine_paths(SOURCE, files)
        self.assertEqual(found, [], "machine paths in tracked files (take them from an argument or the "
                                    "environment, or record them relative to the checkout):\n" + "\n".join(found))

    def test_a_planted_path_is_caught_and_urls_and_relative_paths_are_not(self):
        with tempfile.TemporaryDirectory() as root:
            files = {
                "docs/a.md": "run /work/fixenv/bin/python regenerate.py\n",
                "bench/r.json": '{"command": ["/home/me/kvx/build/bin/kvx"]}\n',
                "tools/ok.py": "URL = 'https://example.com/home/work/'  # .cache/models/work/ and ~/home/ too\n",
                "testdata/blob.bin": "\0/work/ in a binary file\n",
            }
            for name, text in files.items():
                os.makedirs(os.path.join(root, os.path.dirname(name)), exist_ok=True)
                with open(os.path.join(root, name), "w", encoding="utf-8") as f:
                    f.write(text)
            found = machine_paths(root, sorted(files))
        self.assertEqual([line.split(":", 2)[0] for line in found], ["bench/r.json", "docs/a.md"])


if __name__ == "__main__":
    unittest.main()
