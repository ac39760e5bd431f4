"""The kvx checkout these tools sit in (tools/kvx_tools/ lies two folders below its root), where the fixture
generators and the benchmark drivers find the repository's testdata/, bench/, build/, docs/ and .cache/ by
default. The converter and the exporters need none of it, so a copy installed outside a checkout converts the same."""
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
