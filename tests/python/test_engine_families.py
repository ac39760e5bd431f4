"""The engine against HF transformers' own logits, family by family.

testdata/exporters/<family>/hf_weights.safetensors holds the fp32 parameters of the tiny random HF model
that wrote hf_logits.npy (regenerate.py --hf-weights-only checks that they reproduce it);
hf_checkpoint_to_kvx.py maps them to a kvx model directory whose config.json states the family's layer
options as fields, and `kvx logits` runs it: the 12-token prompt in one prefill, and as a prefill of 5 plus 7
single-token decode steps over the KV cache (a prefill of 1 as well: every row but the first from the cache).
Tolerance 1e-4 x max|HF| (fp32), as test_exporter_fixtures.py holds ONNX Runtime to. A family where kvx and
HF disagree would be listed in KNOWN_DISAGREEMENTS with the reason and asserted still to disagree, never
hidden by a looser tolerance.

Needs the kvx binary: $KVX_BIN (ctest sets it), else build/bin/kvx of the source tree. KVX_DEVICE=cuda runs
every family with --device cuda at the same tolerance (ctest's py_engine_families_cuda); where kvx finds no
usable GPU, or was built without CUDA, the run exits 77 (ctest: skipped) with kvx's reason.
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hf_checkpoint_to_kvx import EXPORTERS, write_kvx_model  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
KVX = os.environ.get("KVX_BIN") or str(REPO / "build" / "bin" / "kvx")
DEVICE = os.environ.get("KVX_DEVICE", "cpu")
SKIP_EXIT = 77  # ctest's SKIP_RETURN_CODE
# kvx's reasons for not running --device cuda on this machine (cuda/kernels/device_probe.cpp, the CLI).
NO_DEVICE = ("no usable CUDA device", "no CUDA device is present", "older than sm_70", "cannot query CUDA device",
             "not built in")
TOLERANCE = 1e-4  # x max|HF|

FAMILIES = ("llama3-untied", "llama-tied", "mistral", "qwen2", "qwen3", "phi3", "gemma", "gemma2", "gemma3",
            "gpt2", "gpt-neox",
            # Layer traits beyond those: LayerNorm without weight or bias and clip_qkv (olmo), post-norms and
            # whole-projection q/k norms (olmo2), the four multipliers (granite), LayerNorm with SwiGLU and partial
            # rotary (stablelm), one norm feeding parallel blocks with a biased head (phi), LayerNorm + GELU +
            # window (starcoder2), LayerNorm without bias, interleaved rotary and logit scale (cohere), interleaved
            # partial rotary (gptj), multi-query from a fused projection (falcon), GPT-2 with multi-query
            # (gpt-bigcode).
            "olmo", "olmo2", "granite", "stablelm", "phi", "starcoder2", "cohere", "gptj", "falcon", "gpt-bigcode")
PREFILLS = (12, 5, 1)  # the whole prompt at once; a chunk then decode steps; every token a decode step

# family -> why kvx does not match HF there (none at present).
KNOWN_DISAGREEMENTS = {}


def hf_reference(family):
    folder = next((EXPORTERS / family).glob("*/hf_logits.npy")).parent
    return np.load(folder / "hf_logits.npy"), json.loads((folder / "prompt.json").read_text())


def kvx_logits(model_dir, prompt, n_prefill, out):
    result = subprocess.run([KVX, "logits", "-m", str(model_dir), "--device", DEVICE,
                             "--tokens", ",".join(map(str, prompt)), "--n-prefill", str(n_prefill), "-o", str(out)],
                            capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise AssertionError(f"kvx logits failed ({result.returncode}): {result.stderr.strip()}")
    return np.load(out)


class EngineFamiliesTest(unittest.TestCase):
    def check_family(self, family):
        hf, prompt = hf_reference(family)
        scale = float(np.abs(hf).max())
        with tempfile.TemporaryDirectory() as tmp:
            model = write_kvx_model(family, Path(tmp) / "model")
            for n_prefill in PREFILLS:
                with self.subTest(family=family, n_prefill=n_prefill):
                    got = kvx_logits(model, prompt, n_prefill, Path(tmp) / f"logits{n_prefill}.npy")
                    self.assertEqual(got.shape, hf.shape)
                    error = float(np.abs(got - hf).max()) / scale
                    print(f"{family} n_prefill={n_prefill}: max|kvx - HF| / max|HF| = {error:.2e}", flush=True)
                    if family in KNOWN_DISAGREEMENTS:
                        self.assertGreater(error, TOLERANCE, f"{family} now agrees: drop it from KNOWN_DISAGREEMENTS")
                    else:
                        self.assertLessEqual(error, TOLERANCE, f"{family} n_prefill={n_prefill}: kvx differs from HF")


def _add_family_test(family):
    name = "test_" + family.replace("-", "_")
    setattr(EngineFamiliesTest, name, lambda self: self.check_family(family))


for _family in FAMILIES:
    _add_family_test(_family)


def device_unavailable():
    """kvx's reason for refusing DEVICE on this machine, or None where it runs a model there."""
    if DEVICE == "cpu":
        return None
    _, prompt = hf_reference(FAMILIES[0])
    with tempfile.TemporaryDirectory() as tmp:
        model = write_kvx_model(FAMILIES[0], Path(tmp) / "model")
        try:
            kvx_logits(model, prompt[:1], 1, Path(tmp) / "probe.npy")
        except AssertionError as e:
            if any(reason in str(e) for reason in NO_DEVICE):
                return str(e)
    return None


if __name__ == "__main__":
    why = device_unavailable()
    if why:
        print(f"SKIP: --device {DEVICE}: {why}")
        sys.exit(SKIP_EXIT)
    unittest.main()
