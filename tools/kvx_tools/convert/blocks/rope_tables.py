"""RoPE's inverse frequencies from precomputed cos/sin caches (ONNX Runtime's RotaryEmbedding inputs).

kvx stores rope_inv_freq and computes cos/sin(position * inv_freq) itself, so a graph that only holds the
tables cos_cache[p][j] = cos(p * inv_freq[j]) (sin alike, usually rounded to fp16) must give the
frequencies back. Each column's angle, unwrapped along the positions, is a line through the origin; its
least-squares slope is the frequency to about 1e-8. The fp32 values next to it are then tried against the
last positions (where an error in the frequency shows most) and the one reproducing most entries exactly
is kept: where the tables can tell neighbouring fp32 values apart at all (the higher frequencies), that is
the exporter's own fp32 frequency, so kvx's fp32 angles are the exporter's.

The result is verified at every position: cos and sin of the fp32 angle position * inv_freq (as kvx
computes them) must lie within one fp16 rounding step at 1 (2^-11) of the caches. Tables that are not plain
RoPE (scaled by an attention factor, several frequencies per column, frequencies beyond pi per position)
fail this and are refused rather than approximated.
"""

import numpy as np

from ..errors import ConvertError

TOLERANCE = 2.0 ** -11  # one fp16 rounding step of a value in [0.5, 1)
CANDIDATE_ULPS = 16  # fp32 values tried on each side of the least-squares frequency
FIT_POSITIONS = 1024  # the last positions the candidates are compared on


def inv_freq_from_caches(cos_cache, sin_cache):
    """(inv_freq [half] fp32, worst error) for caches [positions, half]; the worst error is the largest
    |cos/sin(p * inv_freq) - cache| over every entry, to compare with TOLERANCE."""
    cos = np.asarray(cos_cache, dtype=np.float64)
    sin = np.asarray(sin_cache, dtype=np.float64)
    positions = np.arange(cos.shape[0], dtype=np.float64)[:, None]
    angles = np.unwrap(np.arctan2(sin, cos), axis=0)
    denominator = max(float((positions ** 2).sum()), 1.0)  # a one-row cache carries no frequency
    fitted = ((positions * angles).sum(axis=0) / denominator).astype(np.float32)
    inv_freq = _closest_fp32(fitted, cos_cache, sin_cache)
    return inv_freq, _worst_error(inv_freq, cos, sin, 0)


def plain_inv_freq(node, cos_cache, sin_cache):
    """inv_freq of the caches node reads, or ConvertError naming node when they are not plain RoPE's tables
    (cos/sin(position * inv_freq), one frequency per column, within fp16 rounding)."""
    inv_freq, error = inv_freq_from_caches(cos_cache, sin_cache)
    if not error <= TOLERANCE:
        raise ConvertError(f"cannot map node '{node.name}' (op {node.op_type}): its cos_cache/sin_cache are not "
                           f"cos/sin(position * inv_freq) with one frequency per column (off by {error:.3g}, "
                           f"more than fp16 rounding {TOLERANCE:.3g}); kvx supports plain RoPE")
    return inv_freq


def _angles(inv_freq, first, count):
    """fp32 position * inv_freq for positions first .. first + count - 1: kvx's own arithmetic."""
    positions = np.arange(first, first + count, dtype=np.float32)[:, None]
    return (positions * inv_freq[None, :]).astype(np.float64)


def _worst_error(inv_freq, cos, sin, first):
    angles = _angles(inv_freq, first, cos.shape[0] - first)
    return max(float(np.abs(np.cos(angles) - cos[first:]).max(initial=0.0)),
               float(np.abs(np.sin(angles) - sin[first:]).max(initial=0.0)))


def _closest_fp32(fitted, cos_cache, sin_cache):
    """Per column, the fp32 value within CANDIDATE_ULPS of fitted whose angles, rounded like the caches,
    reproduce the most entries of the last FIT_POSITIONS positions."""
    cache_dtype = np.asarray(cos_cache).dtype
    first = max(0, cos_cache.shape[0] - FIT_POSITIONS)
    cos_tail, sin_tail = np.asarray(cos_cache)[first:], np.asarray(sin_cache)[first:]
    steps = np.arange(-CANDIDATE_ULPS, CANDIDATE_ULPS + 1)
    best = fitted.copy()
    for j, value in enumerate(fitted):
        candidates = _fp32_neighbours(value, steps)  # [candidates]
        angles = _angles(candidates, first, cos_tail.shape[0])  # [positions, candidates]
        matches = ((np.cos(angles).astype(cache_dtype) == cos_tail[:, j:j + 1]).sum(axis=0)
                   + (np.sin(angles).astype(cache_dtype) == sin_tail[:, j:j + 1]).sum(axis=0))
        # Ties go to the candidate nearest the fit (steps run outwards from it in this order).
        order = np.argsort(np.abs(steps), kind="stable")
        best[j] = candidates[order[np.argmax(matches[order])]]
    return best


def _fp32_neighbours(value, steps):
    """The fp32 values `steps` ulps away from value (negative steps below it)."""
    bits = np.float32(value).view(np.int32).astype(np.int64)
    sign = -1 if value < 0 else 1
    return (bits + sign * steps).astype(np.int32).view(np.float32)
