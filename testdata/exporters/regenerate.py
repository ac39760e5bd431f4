#!/usr/bin/env python3
"""Regenerates testdata/exporters/: tiny random-weight HF decoders of each family, HF's own logits on a
fixed prompt, and the ONNX graphs the common exporters write for them, one folder per
(family, exporter). Needs the packages of requirements.txt (torch, transformers, optimum-onnx,
onnxruntime-genai, ...), which kvx's CI does not have; run it with the Python of an environment that has
requirements.txt's packages, and name the Python of the builder's environment (requirements-builder.txt)
with --builder-python or $KVX_BUILDER_PYTHON when a genai-* exporter runs:

    python testdata/exporters/regenerate.py [--family NAME ...] [--exporter NAME ...] [--builder-python PY]

Writes, per pair, testdata/exporters/<family>/<exporter>/:
    model.onnx (+ model.onnx.data where the exporter insists), genai_config.json (builder only),
    hf_logits.npy fp32 [prompt_len, vocab], prompt.json, fixture.json
and testdata/exporters/not_made.json (pairs an exporter refused, with its error line) and summary.json
(ORT-vs-HF error and operators of note per pair, the source of README.md's matrix).

With --hf-weights-only it writes nothing of the above, only testdata/exporters/<family>/hf_weights.safetensors:
the fp32 parameters HF ran (same seed) plus each rotary module's inv_freq buffer, after checking that the
model reproduces the committed hf_logits.npy bit for bit and that a fresh model loaded from the file does too.
tests/python/hf_checkpoint_to_kvx.py maps them to a kvx model directory for the engine's own test.
"""

import argparse
import contextlib
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

import numpy as np
import torch
import transformers

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "tests" / "python"))
import exporter_feeds  # noqa: E402  (the test's own feed builder, so regenerate and test agree)

SEED = 1234
PROMPT_LEN = 12    # longer than every sliding window below (4), so windows change the logits
WINDOW = 4
VOCAB = 128
TOOLS = ("torch", "transformers", "optimum", "optimum-onnx", "onnx", "onnxruntime", "onnxscript",
         "onnxruntime-genai", "tokenizers")

# Shared small dims: hidden 64, 4 query heads of 16 over 2 KV heads (GQA), MLP 96, 2 layers. head_dim 16
# is the smallest ORT's CPU GroupQueryAttention takes ("head_size shall be a multiple of 16").
HEAD_DIM = 16
SMALL = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)

# family -> (config class name, config kwargs). Values chosen so each family's distinctive feature
# changes the logits of a 12-token prompt (windows of 4, soft caps near the logits' scale, ...).
FAMILIES = {
    "llama3-untied": ("LlamaConfig", dict(
        SMALL, tie_word_embeddings=False, max_position_embeddings=256, rope_theta=10000.0,
        # head_dim 16: wavelengths 6.3 and 20 (kept), 63 (smoothed band 32..128), 199.. (divided by 8).
        rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                          original_max_position_embeddings=128))),
    "llama-tied": ("LlamaConfig", dict(SMALL, tie_word_embeddings=True)),
    "mistral": ("MistralConfig", dict(SMALL, sliding_window=WINDOW, tie_word_embeddings=False)),
    "qwen2": ("Qwen2Config", dict(SMALL, tie_word_embeddings=True)),  # q/k/v biases
    "qwen3": ("Qwen3Config", dict(SMALL, head_dim=HEAD_DIM, tie_word_embeddings=True)),  # q/k RMSNorm per head
    "phi3": ("Phi3Config", dict(SMALL, original_max_position_embeddings=64, pad_token_id=0,
                                tie_word_embeddings=False)),  # fused qkv_proj, gate_up_proj
    # LongRoPE: max 64 over an original 32; a 12-token prompt uses short_factor and the attention factor.
    "phi3-longrope": ("Phi3Config", dict(
        SMALL, original_max_position_embeddings=32, pad_token_id=0, tie_word_embeddings=False,
        rope_scaling=dict(type="longrope", short_factor=[1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 6.0],
                          long_factor=[2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 12.0, 16.0]))),
    "gemma": ("GemmaConfig", dict(SMALL, head_dim=HEAD_DIM, hidden_activation="gelu_pytorch_tanh")),
    "gemma2": ("Gemma2Config", dict(
        SMALL, head_dim=HEAD_DIM, sliding_window=WINDOW, query_pre_attn_scalar=32,  # scale 1/sqrt(32), not 1/4
        final_logit_softcapping=3.0, attn_logit_softcapping=2.0)),  # layer 0 sliding, layer 1 global
    "gemma3": ("Gemma3TextConfig", dict(
        SMALL, head_dim=HEAD_DIM, sliding_window=WINDOW, query_pre_attn_scalar=32,
        layer_types=["sliding_attention", "full_attention"],
        rope_theta=1000000.0, rope_local_base_freq=10000.0)),
    "gpt2": ("GPT2Config", dict(vocab_size=VOCAB, n_embd=64, n_inner=96, n_layer=2, n_head=4, n_positions=64,
                                bos_token_id=0, eos_token_id=0)),
    "gpt-neox": ("GPTNeoXConfig", dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96,
                                       num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64,
                                       rotary_pct=0.5, use_parallel_residual=True, tie_word_embeddings=False,
                                       bos_token_id=0, eos_token_id=0)),
}

# Token ids inside the tiny vocabulary, where a family's defaults point past it (OLMo's eos 50279).
IDS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)

# Families of other layer traits (LayerNorm kinds, parallel residuals, partial and interleaved rotary, biases,
# whole-projection q/k norms, clipping, scalar multipliers), each with the trait's value set where it changes
# the logits of the 12-token prompt.
FAMILIES.update({
    # LayerNorm without weight or bias (non-parametric), q/k/v clipped to [-clip, clip], SwiGLU.
    "olmo": ("OlmoConfig", dict(SMALL, clip_qkv=1.5, tie_word_embeddings=False, **IDS)),
    # RMSNorm after each block only (no pre-norm), q/k RMSNorm over the whole projection (not per head).
    "olmo2": ("Olmo2Config", dict(SMALL, tie_word_embeddings=False, **IDS)),
    # The four multipliers: embedding, residual branches, attention scores (instead of 1/sqrt(head_dim)), logits.
    "granite": ("GraniteConfig", dict(SMALL, embedding_multiplier=6.0, residual_multiplier=0.35,
                                      attention_multiplier=0.1, logits_scaling=1.6, tie_word_embeddings=True)),
    # LayerNorm with bias, partial rotary (a quarter of each head), q/k/v biases, sequential residual.
    "stablelm": ("StableLmConfig", dict(SMALL, partial_rotary_factor=0.25, use_qkv_bias=True,
                                        tie_word_embeddings=False)),
    # One LayerNorm feeding attention and MLP side by side (parallel residual), partial rotary, biases on
    # every projection and on the LM head, GELU-tanh MLP.
    "phi": ("PhiConfig", dict(SMALL, partial_rotary_factor=0.5, tie_word_embeddings=False)),
    # LayerNorm with bias, biases everywhere, GELU-tanh (ungated) MLP, sliding window.
    "starcoder2": ("Starcoder2Config", dict(SMALL, sliding_window=WINDOW, use_bias=True, tie_word_embeddings=False,
                                            **IDS)),
    # LayerNorm without bias, parallel residual on one norm, interleaved rotary, logits scaled, tied.
    "cohere": ("CohereConfig", dict(SMALL, logit_scale=0.5, tie_word_embeddings=True, **IDS)),
    # Parallel residual on one LayerNorm, interleaved partial rotary (8 of 16), biased MLP and LM head.
    "gptj": ("GPTJConfig", dict(vocab_size=VOCAB, n_embd=64, n_inner=96, n_layer=2, n_head=4, rotary_dim=8,
                                n_positions=64, tie_word_embeddings=False, bos_token_id=0, eos_token_id=0)),
    # Multi-query attention (one KV head) from one fused projection, parallel residual, exact GELU.
    "falcon": ("FalconConfig", dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                    multi_query=True, parallel_attn=True, new_decoder_architecture=False,
                                    bias=False, alibi=False, ffn_hidden_size=96, max_position_embeddings=64,
                                    bos_token_id=0, eos_token_id=0)),
    # GPT-2's layer with multi-query attention (one KV head).
    "gpt-bigcode": ("GPTBigCodeConfig", dict(vocab_size=VOCAB, n_embd=64, n_inner=96, n_layer=2, n_head=4,
                                             multi_query=True, n_positions=64, bos_token_id=0, eos_token_id=0)),
})

MODEL_CLASSES = {"Gemma3TextConfig": "Gemma3ForCausalLM"}  # the rest: AutoModelForCausalLM


# ---------------------------------------------------------------------------------------------------
# The HF model and its logits


MANTISSA_BITS = 4  # of the random weights (randomise)


def build_model(family, mantissa_bits=MANTISSA_BITS):
    """The random-weight model in eval mode, fp32, eager attention (the reference HF itself trusts for
    soft-capping and windows); weights of mantissa_bits (None: full fp32, as testdata/quantized/ keeps)."""
    config_class, kwargs = FAMILIES[family]
    config = getattr(transformers, config_class)(**kwargs)
    config._attn_implementation = "eager"
    torch.manual_seed(SEED)
    model_class = MODEL_CLASSES.get(config_class)
    model = (getattr(transformers, model_class)(config) if model_class
             else transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager"))
    randomise(model, mantissa_bits)
    return model.eval()


def load_as_users_do(hf_folder):
    """The saved model as a user loads it: AutoModelForCausalLM.from_pretrained with no attention argument,
    which gives HF's default attention (sdpa where the family has it, since transformers 4.36)."""
    return transformers.AutoModelForCausalLM.from_pretrained(str(hf_folder)).eval()


@torch.no_grad()
def randomise(model, mantissa_bits=MANTISSA_BITS):
    """HF's init (std 0.02, biases 0, norms 1) gives near-constant logits and hides biases and norm
    weights; draw everything instead: matrices N(0, 1/fan), vectors named weight 1 + N(0, 0.1)
    (norm scales; Gemma's 1 + w form then scales by about 2), other vectors (biases) N(0, 0.1).
    Each value keeps mantissa_bits of fp32's 23 mantissa bits (truncated; None keeps all): still random to the
    tests, and the committed graphs compress 3x in git (random fp32 does not compress at all)."""
    generator = torch.Generator().manual_seed(SEED)
    for name, p in model.named_parameters():
        noise = torch.randn(p.shape, generator=generator)
        if p.dim() >= 2:
            value = noise / p.shape[-1] ** 0.5
        elif name.endswith("weight"):
            value = 1.0 + 0.1 * noise
        else:
            value = 0.1 * noise
        p.copy_(value if mantissa_bits is None else short_mantissa(value, mantissa_bits))


def short_mantissa(t, bits=4):
    """fp32 t with all but the top `bits` mantissa bits cleared (sign and exponent kept)."""
    mask = (0xFFFFFFFF << (23 - bits)) & 0xFFFFFFFF
    return (t.float().contiguous().view(torch.int32) & torch.tensor(mask, dtype=torch.int64).to(torch.int32)).view(torch.float32)


def prompt_ids():
    return np.random.default_rng(SEED).integers(3, VOCAB, PROMPT_LEN).tolist()


@torch.no_grad()
def hf_logits(model, prompt):
    """fp32 [prompt_len, vocab]."""
    return model(torch.tensor([prompt])).logits[0].float().numpy()


def save_hf_folder(model, folder):
    """save_pretrained plus a tiny word-level tokenizer (optimum and the GenAI builder load one)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    model.save_pretrained(folder)
    vocab = {f"t{i}": i for i in range(VOCAB)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t0", pad_token="t0",
                                                bos_token="t1", eos_token="t2")
    fast.save_pretrained(folder)


# ---------------------------------------------------------------------------------------------------
# torch.onnx.export wrappers: flat tensors in, flat tensors out, names we choose


class NoCache(torch.nn.Module):
    """input_ids, attention_mask, position_ids [batch, seq] -> logits [batch, seq, vocab]."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, position_ids):
        return self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                          use_cache=False).logits


class WithCache(torch.nn.Module):
    """input_ids, position_ids [batch, seq], attention_mask [batch, past + seq],
    then past_key_values.{i}.key/value [batch, kv_heads, past, head_dim] for each layer
    -> logits [batch, seq, vocab], present.{i}.key/value [batch, kv_heads, past + seq, head_dim]."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, position_ids, *past):
        # No config: plain growing layers. DynamicCache(config=...) gives windowed families layers that
        # keep only the last window - 1 positions, whose trimming the tracer freezes at the example's
        # sizes (Mistral's logits then wrong by 5, Gemma 2/3 failing in Gather); the mask applies the window.
        cache = transformers.DynamicCache()
        for i in range(len(past) // 2):
            cache.update(past[2 * i], past[2 * i + 1], i)
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         past_key_values=cache, use_cache=True)
        present = [t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)]
        return (out.logits, *present)


def kv_shape(config):
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return kv_heads, head_dim


def example_inputs(model, with_cache, past=3, seq=5):
    """Traced with past 3, seq 5, batch 2 so no dim is specialised to 0 or 1 by the tracer."""
    batch, config = 2, model.config
    ids = torch.randint(3, VOCAB, (batch, seq))                       # [2, 5]
    mask = torch.ones(batch, past + seq, dtype=torch.int64)           # [2, 8]
    positions = torch.arange(past, past + seq).repeat(batch, 1)       # [2, 5]
    if not with_cache:
        return (ids, mask[:, past:], positions - past), ["input_ids", "attention_mask", "position_ids"], ["logits"]
    kv_heads, head_dim = kv_shape(config)
    n = config.num_hidden_layers
    cache = [torch.randn(batch, kv_heads, past, head_dim) for _ in range(2 * n)]  # each [2, Hkv, 3, D]
    kv_names = [f"past_key_values.{i}.{kind}" for i in range(n) for kind in ("key", "value")]
    out_names = ["logits"] + [name.replace("past_key_values", "present") for name in kv_names]
    return (ids, mask, positions, *cache), ["input_ids", "attention_mask", "position_ids", *kv_names], out_names


@contextlib.contextmanager
def traceable_transformers():
    """transformers >= 4.53 builds masks with torch.vmap and packed-sequence checks with torch.diff,
    which the TorchScript tracer cannot follow (IndexError: unordered_map::at), and >= 4.56 concatenates
    onto an empty cache. optimum patches these for its own export; a plain torch.onnx.export user must
    do the same, so borrow optimum's replacements for the duration of the export."""
    from optimum.exporters.onnx import model_patcher as mp
    from transformers import masking_utils
    from transformers.cache_utils import DynamicLayer
    saved = (masking_utils.find_packed_sequence_indices, DynamicLayer.update)
    masking_utils.ALL_MASK_ATTENTION_FUNCTIONS.register("sdpa", mp.sdpa_mask_without_vmap)
    masking_utils.ALL_MASK_ATTENTION_FUNCTIONS.register("eager", mp.eager_mask_without_vmap)
    masking_utils.find_packed_sequence_indices = mp.find_packed_sequence_indices_patched
    DynamicLayer.update = mp.patched_dynamic_layer_update
    try:
        yield
    finally:
        masking_utils.ALL_MASK_ATTENTION_FUNCTIONS.register("sdpa", masking_utils.sdpa_mask)
        masking_utils.ALL_MASK_ATTENTION_FUNCTIONS.register("eager", masking_utils.eager_mask)
        masking_utils.find_packed_sequence_indices, DynamicLayer.update = saved


def torchscript_export(model, path, with_cache):
    args, in_names, out_names = example_inputs(model, with_cache)
    axes = {"input_ids": {0: "batch", 1: "seq"}, "position_ids": {0: "batch", 1: "seq"},
            "attention_mask": {0: "batch", 1: "total_seq" if with_cache else "seq"}, "logits": {0: "batch", 1: "seq"}}
    for name in in_names[3:]:
        axes[name] = {0: "batch", 2: "past_seq"}
    for name in out_names[1:]:
        axes[name] = {0: "batch", 2: "total_seq"}
    wrapper = WithCache(model) if with_cache else NoCache(model)
    with traceable_transformers():
        torch.onnx.export(wrapper, args, str(path), dynamo=False, opset_version=17, input_names=in_names,
                          output_names=out_names, dynamic_axes=axes, do_constant_folding=True)


def dynamo_export(model, path, with_cache=True, optimize=True, opset=None):
    """dynamo=True (torch.onnx.export's default since torch 2.9) over the wrapper: the graph a decoder needs,
    with torch.export's own names. optimize=True and opset None (the exporter's own, 18) are its defaults."""
    args, in_names, out_names = example_inputs(model, with_cache=with_cache)
    # Dim.AUTO: torch.export finds the relations itself (the mask is past + seq long, which named Dims
    # cannot say: "Attempted to add Dim('past_seq') to seq, where an integer was expected").
    auto = torch.export.Dim.AUTO
    shapes = [{0: auto, 1: auto}] * 3 + ([tuple({0: auto, 2: auto} for _ in args[3:])] if with_cache else [])
    options = {} if opset is None else {"opset_version": opset}
    program = torch.onnx.export(WithCache(model) if with_cache else NoCache(model), args, dynamo=True,
                                input_names=in_names, output_names=out_names, dynamic_shapes=tuple(shapes),
                                optimize=optimize, **options)
    program.save(str(path), external_data=False)
    strip_node_metadata(path)


def first_try_export(model, path):
    """A user's first try, README's command: torch.onnx.export(model, (input_ids,), path) with every option at its
    default (dynamo, its optimizer, no dynamic shapes: the graph is fixed to the 12-token prompt), the model as
    from_pretrained loads it with its cache off (torch cannot return HF's DynamicCache)."""
    model.config.use_cache = False
    try:
        program = torch.onnx.export(model, (torch.tensor([prompt_ids()]),), dynamo=True)
    finally:
        model.config.use_cache = True
    program.save(str(path), external_data=False)
    strip_node_metadata(path)


def strip_node_metadata(path):
    """dynamo records each node's Python stack and module path in node.metadata_props: about 300 KB of
    text per fixture, half its size. Nothing else is touched (names, value_info and weights stay)."""
    import onnx
    model = onnx.load(str(path))
    for node in model.graph.node:
        del node.metadata_props[:]
    onnx.save(model, str(path))


# ---------------------------------------------------------------------------------------------------
# optimum and the GenAI builder, both from a saved HF folder


def optimum_export(hf_folder, out):
    from optimum.exporters.onnx import main_export
    main_export(str(hf_folder), output=str(out), task="text-generation-with-past", device="cpu",
                do_validation=False, no_post_process=False)


# onnxruntime-genai's builder imports classes of transformers 5 (Qwen3_5ForConditionalGeneration) while
# optimum-onnx pins transformers < 4.58, so the builder runs from its own environment
# (requirements-builder.txt) on the folder this one saved. Its Python: --builder-python, else
# $KVX_BUILDER_PYTHON (main() refuses a genai-* exporter without one).
BUILDER_PYTHON = os.environ.get("KVX_BUILDER_PYTHON")


def genai_export(hf_folder, out, precision):
    cache = Path(tempfile.mkdtemp())
    cmd = [BUILDER_PYTHON, "-m", "onnxruntime_genai.models.builder", "-i", str(hf_folder), "-o", str(out),
           "-p", precision, "-e", "cpu", "-c", str(cache)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    shutil.rmtree(cache, ignore_errors=True)
    if result.returncode != 0:
        raise RuntimeError(last_error_line(result.stderr + result.stdout))


# name -> (export(model, hf_folder, out_folder), which model it exports). "eager": the reference model, eager
# attention forced as before; "default": the saved folder loaded as a user does (load_as_users_do), i.e. HF's
# default sdpa attention. optimum and the builder read the saved folder themselves (their own defaults).
EXPORTERS = {
    "torchscript": (lambda model, hf, out: torchscript_export(model, out / "model.onnx", with_cache=False), "eager"),
    "torchscript-past": (lambda model, hf, out: torchscript_export(model, out / "model.onnx", with_cache=True), "eager"),
    "torchscript-sdpa": (lambda model, hf, out: torchscript_export(model, out / "model.onnx", with_cache=False), "default"),
    "torchscript-past-sdpa": (lambda model, hf, out: torchscript_export(model, out / "model.onnx", with_cache=True), "default"),
    "dynamo": (lambda model, hf, out: dynamo_export(model, out / "model.onnx"), "eager"),
    "dynamo-nopast": (lambda model, hf, out: dynamo_export(model, out / "model.onnx", with_cache=False), "eager"),
    "dynamo-sdpa": (lambda model, hf, out: dynamo_export(model, out / "model.onnx"), "default"),
    "dynamo-sdpa-nopast": (lambda model, hf, out: dynamo_export(model, out / "model.onnx", with_cache=False), "default"),
    "dynamo-sdpa-noopt": (lambda model, hf, out: dynamo_export(model, out / "model.onnx", optimize=False), "default"),
    "dynamo-sdpa-opset23": (lambda model, hf, out: dynamo_export(model, out / "model.onnx", opset=23), "default"),
    "dynamo-first-try": (lambda model, hf, out: first_try_export(model, out / "model.onnx"), "default"),
    "optimum": (lambda model, hf, out: optimum_export(hf, out), None),
    "genai-fp32": (lambda model, hf, out: genai_export(hf, out, "fp32"), None),
    "genai-fp16": (lambda model, hf, out: genai_export(hf, out, "fp16"), None),
    "genai-int4": (lambda model, hf, out: genai_export(hf, out, "int4"), None),
}
PRECISIONS = {"genai-fp16": "fp16", "genai-int4": "int4"}  # the test's tolerance; the rest fp32


# What each exporter leaves that ORT does not need: tokenizer and HF config copies.
KEEP = {"model.onnx", "model.onnx.data", "model.onnx_data", "genai_config.json"}


# ---------------------------------------------------------------------------------------------------
# One fixture


def last_error_line(text):
    """The last line that names an exception class and its message (torch's exporter wraps the cause
    in pages of advice), cut to 400 characters."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    errors = [line for line in lines if re.search(r"(Error|Exception|<class '[^']+'>)\S*: ", line)]
    return (errors or lines or ["(no message)"])[-1][:400]


@functools.cache
def versions(python=sys.executable):
    """{package: version} of TOOLS installed for the given interpreter (absent ones left out)."""
    script = ("import json, importlib.metadata as m\n"
              "def v(t):\n    try: return m.version(t)\n    except m.PackageNotFoundError: return None\n"
              f"print(json.dumps({{t: v(t) for t in {TOOLS!r}}}))")
    found = json.loads(subprocess.run([python, "-c", script], capture_output=True, text=True, check=True).stdout)
    return {tool: version for tool, version in found.items() if version}


def graph_signature(model_path):
    import onnx
    graph = onnx.load(str(model_path), load_external_data=False).graph

    def describe(values):
        return [{"name": v.name, "type": onnx.TensorProto.DataType.Name(v.type.tensor_type.elem_type),
                 "shape": [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]} for v in values]
    initializer_names = {i.name for i in graph.initializer}
    ops = sorted({(n.domain or "ai.onnx") + ":" + n.op_type for n in graph.node})
    return {"inputs": describe([v for v in graph.input if v.name not in initializer_names]),
            "outputs": describe(graph.output), "operators": ops}


def ort_errors(folder, hf):
    """{prompt_err, decode_err | decode_fails}: max |ORT - HF| over the prompt's logits, and over the
    last row from a prefill of n-1 tokens plus one cached step (or ORT's message where that step fails)."""
    prompt = json.loads((folder / "prompt.json").read_text())
    logits, decode_last = exporter_feeds.prompt_and_decode(folder, prompt)
    result = {"prompt_err": float(np.abs(logits - hf).max()), "decode_err": None}
    if decode_last is not None:
        try:
            result["decode_err"] = float(np.abs(decode_last() - hf[-1]).max())
        except Exception as error:  # ORT refusing the cached step is a finding, kept with the fixture
            result["decode_fails"] = last_error_line(str(error))
    return result


class ExportFailed(Exception):
    """stage: "export" (the exporter refused) or "onnxruntime" (it wrote a graph ORT cannot run)."""

    def __init__(self, stage, error):
        message = re.sub(r"/tmp/\w+", "<hf folder>", f"{type(error).__name__}: {error}")
        message = message.replace(f"{REPO}/", "")  # the repository's paths as relative ones: no machine's path
        super().__init__(f"{stage}: " + last_error_line(message))
        self.stage = stage


def make_fixture(family, exporter, model, hf_folder, prompt, hf):
    out = HERE / family / exporter
    shutil.rmtree(out, ignore_errors=True)
    staging = Path(tempfile.mkdtemp())
    try:
        EXPORTERS[exporter][0](model, hf_folder, staging)
        for file in staging.iterdir():
            if file.name in KEEP:
                out.mkdir(parents=True, exist_ok=True)
                shutil.move(str(file), out / file.name)
        if not (out / "model.onnx").exists():
            raise RuntimeError(f"no model.onnx among {sorted(f.name for f in staging.iterdir())}")
    except Exception as error:
        raise ExportFailed("export", error) from error
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    np.save(out / "hf_logits.npy", hf.astype(np.float32))  # [prompt_len, vocab]
    (out / "prompt.json").write_text(json.dumps(prompt) + "\n")
    signature = graph_signature(out / "model.onnx")
    fixture = {"family": family, "exporter": exporter, "hf_class": type(model).__name__, "seed": SEED,
               "precision": PRECISIONS.get(exporter, "fp32"),  # the test's tolerance
               "attention": getattr(model.config, "_attn_implementation", None) if EXPORTERS[exporter][1] else None,
               "versions": versions(BUILDER_PYTHON if exporter.startswith("genai") else sys.executable), "hf_config": model.config.to_dict(),
               "inputs": signature["inputs"], "outputs": signature["outputs"]}
    (out / "fixture.json").write_text(json.dumps(fixture, indent=1, sort_keys=True, default=str) + "\n")
    try:
        errors = ort_errors(out, hf)
    except Exception as error:
        raise ExportFailed("onnxruntime", error) from error
    return {"made": True, "max_abs_hf": float(np.abs(hf).max()), **errors, "operators": signature["operators"]}


def hf_weights(model):
    """{name: fp32 tensor}: every parameter under HF's name (tied ones once), and each rotary module's
    inv_freq buffer (not in the state dict: HF recomputes it) under "<module>.inv_freq"."""
    tensors = {name: p.detach().float().contiguous().clone() for name, p in model.named_parameters()}
    for name, buffer in model.named_buffers():
        if name.endswith("inv_freq") and not name.endswith("original_inv_freq"):
            tensors[name] = buffer.detach().float().contiguous().clone()
    return tensors


@torch.no_grad()
def write_hf_weights(family, prompt):
    """<family>/hf_weights.safetensors, checked to reproduce the committed HF logits (every exporter's
    hf_logits.npy of the family holds the same array)."""
    from safetensors.torch import load_file, save_file
    committed = np.load(next((HERE / family).glob("*/hf_logits.npy")))
    model = build_model(family)
    if not np.array_equal(hf_logits(model, prompt), committed):
        raise SystemExit(f"{family}: the rebuilt model does not reproduce the committed hf_logits.npy")
    path = HERE / family / "hf_weights.safetensors"
    save_file(hf_weights(model), str(path), metadata={"family": family, "seed": str(SEED)})
    fresh = build_model(family)
    for p in fresh.parameters():
        p.zero_()
    loaded = load_file(str(path))
    missing = fresh.load_state_dict({k: v for k, v in loaded.items() if not k.endswith("inv_freq")}, strict=False)
    if missing.unexpected_keys:
        raise SystemExit(f"{family}: unexpected keys {missing.unexpected_keys}")
    if not np.array_equal(hf_logits(fresh, prompt), committed):
        raise SystemExit(f"{family}: a model loaded from {path.name} does not reproduce hf_logits.npy")
    print(f"{family}: {path.stat().st_size} bytes, reproduces hf_logits.npy", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", action="append", choices=sorted(FAMILIES), help="default: all")
    parser.add_argument("--exporter", action="append", choices=list(EXPORTERS), help="default: all")
    parser.add_argument("--hf-weights-only", action="store_true",
                        help="write only <family>/hf_weights.safetensors (checked against hf_logits.npy)")
    parser.add_argument("--builder-python", default=BUILDER_PYTHON,
                        help="the Python of the builder's environment (requirements-builder.txt), for the genai-* "
                             "exporters; default: $KVX_BUILDER_PYTHON")
    args = parser.parse_args()
    set_builder_python(parser, args.builder_python, any(e.startswith("genai") for e in args.exporter or EXPORTERS)
                       and not args.hf_weights_only)
    if args.hf_weights_only:
        for family in args.family or FAMILIES:
            write_hf_weights(family, prompt_ids())
        return 0
    summary_path, not_made_path = HERE / "summary.json", HERE / "not_made.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    prompt = prompt_ids()
    for family in args.family or FAMILIES:
        model = build_model(family)
        hf = hf_logits(model, prompt)  # [prompt_len, vocab]
        with tempfile.TemporaryDirectory() as tmp:
            save_hf_folder(model, tmp)
            models = {"eager": model, "default": load_as_users_do(tmp), None: model}
            for exporter in args.exporter or EXPORTERS:
                key = f"{family}/{exporter}"
                print(f"== {key}", flush=True)
                try:
                    summary[key] = make_fixture(family, exporter, models[EXPORTERS[exporter][1]], Path(tmp), prompt, hf)
                except ExportFailed as error:  # a refusal is a result, recorded with its message
                    traceback.print_exc()
                    shutil.rmtree(HERE / family / exporter, ignore_errors=True)
                    summary[key] = {"made": False, "stage": error.stage, "error": str(error)}
                print(f"   {summary[key]}", flush=True)
                write_summary(summary_path, not_made_path, summary)  # after every pair: an interrupted run keeps them
    write_summary(summary_path, not_made_path, summary)
    return 0


def set_builder_python(parser, python, needed):
    """Uses python for the builder; a parser error when a genai-* exporter needs one and none is named."""
    global BUILDER_PYTHON
    if needed and not python:
        parser.error("the genai-* exporters run in the builder's environment: name its Python with --builder-python "
                     "or $KVX_BUILDER_PYTHON (or leave them out with --exporter)")
    BUILDER_PYTHON = python


def write_summary(summary_path, not_made_path, summary):
    summary = dict(sorted(summary.items()))
    summary_path.write_text(json.dumps(summary, indent=1) + "\n")
    not_made = {k: v["error"] for k, v in summary.items() if not v["made"]}
    not_made_path.write_text(json.dumps(not_made, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
