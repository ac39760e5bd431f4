"""The kvx checkout these tools sit in (tools/kvx_tools/ lies two folders below its root), where the fixture
generators and the benchmark drivers find the repository's testdata/, bench/, build/, docs/ and .cache/ by
default. The converter and the exporters need none of it, so a copy installed outside a checkout converts the same."""
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def recorded_path(arg):
    """arg as a result file records it: a path inside the checkout relative to it, any other absolute path by
    its last name (a venv's python, a model kept elsewhere), anything else as it is, so that what is committed
    names no machine's folders."""
    text = str(arg)
    if not text.startswith("/"):
        return text
    path = Path(text)
    return path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else path.name
