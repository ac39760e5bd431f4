"""ONNX Runtime feeds for decoder graphs written by the common exporters, built from the graph's own
input list (names, element types, declared shapes), never from where the file lies.

Input conventions understood (the test fails loudly on any other input, so a new exporter is noticed):
  input_ids             [batch, seq]            token ids, int64 or int32 as declared
  attention_mask        [batch, past + seq]     ones (no padding: one sequence)
  position_ids          [batch, seq]            past .. past + seq - 1
  cache_position        [seq]                   past .. past + seq - 1
  seqlens_k             [batch]                 int32, past + seq - 1 (ORT GroupQueryAttention's convention)
  total_sequence_length []                      int32 scalar, past + seq
  KV cache inputs, each paired with the output that returns it updated:
    past_key_values.{i}.key / .value  [batch, kv_heads, past, head_dim]     -> present.{i}.key / .value
    past_{i}                          [2, batch, kv_heads, past, head_dim]  -> present_{i}  (K and V stacked)
    past_key_{i} / past_value_{i}     [batch, kv_heads, past, head_dim]     -> present_key_{i} / ...
The logits output is the one named "logits" (or the only output whose name does not look like a cache).
Cache dims other than batch and sequence are read from the graph; where it leaves them symbolic (ORT
GenAI's builder declares head_dim as "kv_cache_dim"), pass them in. Two cache disciplines:
  growing        past holds exactly the tokens seen so far; present is one run longer (HF, optimum, torch).
  shared buffer  past and present are one buffer of a fixed capacity (GenAI's past_present_share_buffer,
                 capacity = search.max_length); the length lives in attention_mask / seqlens_k only.
                 ORT's GroupQueryAttention with a window (sliding_window_cache=1) accepts only this one:
                 "KV cache capacity (0) must be at least local_window_size".
genai_config_hints(folder) reads kv_heads, head_dim and capacity from the builder's genai_config.json.

Typical use, a prefill of a prompt then one cached decode step:
    session = open_session(folder / "model.onnx")
    interface = GraphInterface.of(session, **genai_config_hints(folder))
    logits, cache = run(session, prompt[:-1], interface=interface)  # [n-1, vocab], from an empty past
    last, _ = run(session, prompt[-1:], cache, interface)           # [1, vocab]
"""

import json
import re
from dataclasses import dataclass, field

import numpy as np
import onnxruntime as ort

# ONNX Runtime's element type strings -> numpy dtypes, for the inputs we synthesise.
NUMPY_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64,
               "tensor(int32)": np.int32, "tensor(bool)": np.bool_}

# Cache input name -> the output name that carries it after the step. The first matching rule wins.
_PRESENT_RULES = ((re.compile(r"past_key_values\.(\d+)\.(key|value)"), r"present.\1.\2"),
                  (re.compile(r"past_key_values_(\d+)_(key|value)"), r"present_\1_\2"),
                  (re.compile(r"past_(key|value)_(\d+)"), r"present_\1_\2"),
                  (re.compile(r"past_(\d+)"), r"present_\1"))

# Inputs whose value follows from the token count alone; everything else must be a cache input.
_POSITIONAL_INPUTS = {"input_ids", "attention_mask", "position_ids", "cache_position", "seqlens_k",
                      "total_sequence_length"}


def open_session(model_path):
    """A CPU session with one thread: reproducible reductions, and these graphs are tiny."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 4  # fatal only: failures still raise, without a second copy on stderr
    return ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])


def present_name(past_name):
    """The output that returns cache input past_name updated, or None when it is not a cache input."""
    for pattern, replacement in _PRESENT_RULES:
        if pattern.fullmatch(past_name):
            return pattern.sub(replacement, past_name)
    return None


@dataclass
class CacheInput:
    """One KV cache input. shape: the declared dims, ints where fixed, None where symbolic.
    past_axis: which axis grows with the sequence (2 in BNSH [batch, heads, seq, head_dim], 3 in the
    stacked [2, batch, heads, seq, head_dim])."""
    name: str
    present: str
    dtype: type
    shape: list
    past_axis: int

    def empty(self, capacity=0):
        """An empty past: batch 1, capacity positions (0: growing cache), the other dims as declared."""
        batch_axis = self.past_axis - 2
        dims = [1 if axis == batch_axis else capacity if axis == self.past_axis else dim
                for axis, dim in enumerate(self.shape)]
        if any(d is None for d in dims):
            raise ValueError(f"cache input {self.name} has symbolic heads or head_dim {self.shape}: "
                             "pass kv_heads and head_dim to GraphInterface.of")
        return np.zeros(dims, self.dtype)


@dataclass
class GraphInterface:
    """What a decoder graph takes and gives, read from an open session."""
    inputs: dict                      # name -> ORT element type string, for the non-cache inputs
    caches: list = field(default_factory=list)   # CacheInput, in the graph's input order
    logits: str = "logits"
    capacity: int = 0                 # shared-buffer cache length; 0 = growing cache

    @classmethod
    def of(cls, session, kv_heads=None, head_dim=None, capacity=0):
        """kv_heads, head_dim: values for cache dims the graph leaves symbolic (None: none expected);
        capacity: the shared buffer's length, 0 for a growing cache."""
        outputs = [o.name for o in session.get_outputs()]
        inputs, caches = {}, []
        for inp in session.get_inputs():
            present = present_name(inp.name)
            if present is None:
                if inp.name not in _POSITIONAL_INPUTS:
                    raise ValueError(f"input {inp.name} {inp.type} {inp.shape} follows no known convention")
                inputs[inp.name] = inp.type
                continue
            if present not in outputs:
                raise ValueError(f"cache input {inp.name} has no output {present}")
            shape = [d if isinstance(d, int) else None for d in inp.shape]
            if len(shape) not in (4, 5):
                raise ValueError(f"cache input {inp.name} has rank {len(shape)}, not 4 (BNSH) or 5 (2BNSH)")
            shape[-3] = kv_heads if shape[-3] is None else shape[-3]   # [..., heads, seq, head_dim]
            shape[-1] = head_dim if shape[-1] is None else shape[-1]
            caches.append(CacheInput(inp.name, present, NUMPY_TYPES[inp.type], shape, len(shape) - 2))
        cache_outputs = {c.present for c in caches}
        candidates = [n for n in outputs if n not in cache_outputs and not n.startswith("present")]
        logits = "logits" if "logits" in outputs else candidates[0] if len(candidates) == 1 else None
        if logits is None:
            raise ValueError(f"no logits output among {outputs}")
        return cls(inputs, caches, logits, capacity)

    @property
    def has_cache(self):
        return bool(self.caches)


def genai_config_hints(folder):
    """GraphInterface.of's keyword arguments from ORT GenAI's genai_config.json in folder (a Path), or {}
    where there is none: kv_heads, head_dim, and capacity = max_length where past and present share a
    buffer."""
    path = folder / "genai_config.json"
    if not path.exists():
        return {}
    config = json.loads(path.read_text())
    decoder, search = config["model"]["decoder"], config["search"]
    shared = search.get("past_present_share_buffer", False)
    return {"kv_heads": decoder["num_key_value_heads"], "head_dim": decoder["head_size"],
            "capacity": search["max_length"] if shared else 0}


@dataclass
class Cache:
    """The KV cache between runs: arrays (cache input name -> array as the last present returned it)
    and length, the positions it holds (in a shared buffer, fewer than the arrays' capacity)."""
    arrays: dict
    length: int

    @classmethod
    def empty(cls, interface):
        return cls({c.name: c.empty(interface.capacity) for c in interface.caches}, 0)


def _as(type_string, values):
    return np.asarray(values, dtype=NUMPY_TYPES[type_string])


def feeds(interface, tokens, past_len):
    """The non-cache inputs for a run of tokens (int [s]) at absolute positions past_len..past_len+s-1,
    batch 1."""
    s = len(tokens)
    total = past_len + s
    positions = np.arange(past_len, total)  # [s]
    makers = {"input_ids": lambda: np.reshape(tokens, (1, s)),           # [1, s]
              "attention_mask": lambda: np.ones((1, total)),             # [1, past + s]
              "position_ids": lambda: positions.reshape(1, s),           # [1, s]
              "cache_position": lambda: positions,                       # [s]
              "seqlens_k": lambda: np.array([total - 1]),                # [1]
              "total_sequence_length": lambda: np.array(total)}          # []
    return {name: _as(type_string, makers[name]()) for name, type_string in interface.inputs.items()}


def run(session, tokens, cache=None, interface=None):
    """One run of tokens (int [s]) on top of cache (a Cache from an earlier run; None = empty).
    Returns (logits fp32 [s, vocab], the next Cache)."""
    interface = interface or GraphInterface.of(session)
    cache = cache or Cache.empty(interface)
    if interface.capacity and cache.length + len(tokens) > interface.capacity:
        raise ValueError(f"{cache.length} + {len(tokens)} tokens overflow the shared cache of {interface.capacity}")
    wanted = [interface.logits] + [c.present for c in interface.caches]
    feed = {**feeds(interface, tokens, cache.length), **cache.arrays}
    results = dict(zip(wanted, session.run(wanted, feed)))
    next_cache = Cache({c.name: results[c.present] for c in interface.caches}, cache.length + len(tokens))
    logits = results[interface.logits]  # [1, s, vocab]
    return logits.reshape(-1, logits.shape[-1]).astype(np.float32), next_cache


def prompt_and_decode(folder, prompt):
    """The two runs the fixtures are checked with, on folder/model.onnx (a Path) and prompt (int [n]):
    returns (logits of the whole prompt from an empty cache [n, vocab], a callable that prefills n-1
    tokens and then decodes the last one from the cache, returning its logits [vocab], or None where
    the graph has no cache). The callable is separate because some graphs fail only there."""
    session = open_session(folder / "model.onnx")
    interface = GraphInterface.of(session, **genai_config_hints(folder))
    logits, _ = run(session, prompt, interface=interface)

    def decode_last():
        _, cache = run(session, prompt[:-1], interface=interface)
        last, _ = run(session, prompt[-1:], cache, interface)  # [1, vocab]
        return last[-1]
    return logits, decode_last if interface.has_cache else None
