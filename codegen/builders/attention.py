"""Transformer composites: ONNX Attention, RotaryEmbedding, RMSNormalization and
GroupNormalization, expanded into MatMul, Softmax, Transpose, Slice, Concat and elementwise
primitives. Each follows the computation order of the operator's ONNX definition (its
function body and reference), so results agree with ONNX Runtime to rounding.

Masks and sequence lengths known when the graph is built (causal masks, boolean masks,
`nonpad_kv_seqlen`, local windows) become constant additive biases of 0 and -inf; a float mask
computed at run time is added as it is.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from tinsmith.builders.registry import builder
from tinsmith.ops.common import normalize_axis
from tinsmith.ops.registry import Attr, OpError


def _reshape(g, x: str, shape: Sequence[int]) -> str:
    return g.add("Reshape", [x, g.constant(np.array(shape, np.int64), "shape")])[0]


def _transpose(g, x: str, perm: Sequence[int]) -> str:
    return g.add("Transpose", [x], {"perm": list(perm)})[0]


def _slice(g, x: str, axis: int, start: int, end: int, step: int = 1) -> str:
    return g.add("Slice", [x, g.constant(np.array([start], np.int64), "starts"),
                           g.constant(np.array([end], np.int64), "ends"),
                           g.constant(np.array([axis], np.int64), "axes"),
                           g.constant(np.array([step], np.int64), "steps")])[0]


def _present(inputs: Sequence[str], i: int) -> str | None:
    return inputs[i] if i < len(inputs) and inputs[i] else None


# --- RMSNormalization, GroupNormalization ------------------------------------------------------
@builder("RMSNormalization", inputs=2,
         attrs=[Attr("axis", "int", -1), Attr("epsilon", "float", 1e-5), Attr("stash_type", "int", 1, (1,))])
def rms_normalization(g, inputs, attrs):
    """X / sqrt(mean(X^2 over axes [axis, rank)) + epsilon) * scale."""
    x, scale = inputs
    rank = len(g.type_of(x).shape)
    axes = list(range(normalize_axis(attrs["axis"], rank), rank))
    mean = g.add("ReduceMean", [g.add("Mul", [x, x])[0]], {"axes": axes, "keepdims": 1})[0]
    rms = g.add("Sqrt", [g.add("Add", [mean, g.scalar(attrs["epsilon"])])[0]])[0]
    return [g.add("Mul", [g.add("Mul", [x, g.add("Reciprocal", [rms])[0]])[0], scale])[0]]


@builder("GroupNormalization", inputs=3,
         attrs=[Attr("epsilon", "float", 1e-5), Attr("num_groups", "int"), Attr("stash_type", "int", 1, (1,))])
def group_normalization(g, inputs, attrs):
    """Each group of num_groups channels normalised over its channels and spatial positions,
    then scaled and shifted per channel (opset 21; opset 18's per-group scale is upgraded)."""
    x, scale, bias = inputs
    shape = g.type_of(x).shape
    groups = attrs["num_groups"]
    if len(shape) < 2 or groups <= 0 or shape[1] % groups:
        raise OpError(f"GroupNormalization: {shape[1] if len(shape) > 1 else '?'} channels do not split "
                      f"into {groups} groups", attr="num_groups")
    channels = shape[1]
    for i, what in ((1, "scale"), (2, "bias")):
        if tuple(g.type_of(inputs[i]).shape) != (channels,):
            raise OpError(f"GroupNormalization {what} has shape {list(g.type_of(inputs[i]).shape)}, "
                          f"expected [{channels}]", input=i)
    grouped = _reshape(g, x, [shape[0], groups, -1])
    mean = g.add("ReduceMean", [grouped], {"axes": [2], "keepdims": 1})[0]
    centered = g.add("Sub", [grouped, mean])[0]
    variance = g.add("ReduceMean", [g.add("Mul", [centered, centered])[0]], {"axes": [2], "keepdims": 1})[0]
    std = g.add("Sqrt", [g.add("Add", [variance, g.scalar(attrs["epsilon"])])[0]])[0]
    normalized = _reshape(g, g.add("Div", [centered, std])[0], [shape[0], channels, -1])
    per_channel = [channels, 1]
    y = g.add("Add", [g.add("Mul", [normalized, _reshape(g, scale, per_channel)])[0],
                      _reshape(g, bias, per_channel)])[0]
    return [_reshape(g, y, list(shape))]


# --- RotaryEmbedding ---------------------------------------------------------------------------
@builder("RotaryEmbedding", inputs=(3, 4),
         attrs=[Attr("interleaved", "int", 0, (0, 1)), Attr("num_heads", "int", 0),
                Attr("rotary_embedding_dim", "int", 0)])
def rotary_embedding(g, inputs, attrs):
    """Rotate pairs of each head's first rotary_embedding_dim features by the cached angles:
    halves (x1 = first half, x2 = second) or, interleaved, even and odd features."""
    x, cos, sin = inputs[:3]
    positions = _present(inputs, 3)
    shape = list(g.type_of(x).shape)
    if len(shape) == 4:  # [batch, heads, seq, head] -> [batch, seq, heads, head]
        work = _transpose(g, x, [0, 2, 1, 3])
    elif len(shape) == 3:
        heads = attrs["num_heads"]
        if heads <= 0 or shape[2] % heads:
            raise OpError(f"RotaryEmbedding of a rank-3 input needs num_heads dividing {shape[2]}",
                          attr="num_heads")
        work = _reshape(g, x, [shape[0], shape[1], heads, shape[2] // heads])
    else:
        raise OpError(f"RotaryEmbedding input has rank {len(shape)}, expected 3 or 4", input=0)
    batch, seq, heads, head = g.type_of(work).shape
    dim = attrs["rotary_embedding_dim"] or head
    if dim % 2 or dim > head:
        raise OpError(f"RotaryEmbedding rotary_embedding_dim {dim} must be even and at most the head "
                      f"size {head}", attr="rotary_embedding_dim")
    half = dim // 2
    if positions is not None:
        cos = g.add("Gather", [cos, positions], {"axis": 0})[0]
        sin = g.add("Gather", [sin, positions], {"axis": 0})[0]
    for i, cache in ((1, cos), (2, sin)):
        if tuple(g.type_of(cache).shape) != (batch, seq, half):
            raise OpError(f"RotaryEmbedding {'cos' if i == 1 else 'sin'} cache gives shape "
                          f"{list(g.type_of(cache).shape)}, expected [{batch}, {seq}, {half}]", input=i)
    cos, sin = (_reshape(g, c, [batch, seq, 1, half]) for c in (cos, sin))
    rotate = _slice(g, work, 3, 0, dim) if dim < head else work
    if attrs["interleaved"]:
        x1, x2 = _slice(g, rotate, 3, 0, dim, 2), _slice(g, rotate, 3, 1, dim, 2)
    else:
        x1, x2 = _slice(g, rotate, 3, 0, half), _slice(g, rotate, 3, half, dim)
    real = g.add("Sub", [g.add("Mul", [cos, x1])[0], g.add("Mul", [sin, x2])[0]])[0]
    imag = g.add("Add", [g.add("Mul", [sin, x1])[0], g.add("Mul", [cos, x2])[0]])[0]
    if attrs["interleaved"]:
        pairs = g.add("Concat", [_reshape(g, real, [batch, seq, heads, half, 1]),
                                 _reshape(g, imag, [batch, seq, heads, half, 1])], {"axis": 4})[0]
        rotated = _reshape(g, pairs, [batch, seq, heads, dim])
    else:
        rotated = g.add("Concat", [real, imag], {"axis": 3})[0]
    if dim < head:
        rotated = g.add("Concat", [rotated, _slice(g, work, 3, dim, head)], {"axis": 3})[0]
    if len(shape) == 4:
        return [_transpose(g, rotated, [0, 2, 1, 3])]
    return [_reshape(g, rotated, shape)]


# --- Attention ---------------------------------------------------------------------------------
def _heads_first(g, x: str, heads: int, what: str, index: int) -> str:
    """[batch, seq, heads*size] -> [batch, heads, seq, size]."""
    b, s, hidden = g.type_of(x).shape
    if heads <= 0 or hidden % heads:
        raise OpError(f"Attention {what} hidden size {hidden} does not split into {heads} heads", input=index)
    return _transpose(g, _reshape(g, x, [b, s, heads, hidden // heads]), [0, 2, 1, 3])


def _constant_bias(q_len: int, kv_len: int, batch: int, attrs, past: int,
                   nonpad: np.ndarray | None) -> np.ndarray | None:
    """The causal, local window and padding parts of the bias: [q, kv] or [batch, 1, q, kv]."""
    causal, left, right = attrs["is_causal"], attrs["left_window_size"], attrs["right_window_size"]
    if not causal and left < 0 and right < 0 and nonpad is None:
        return None
    i = np.arange(q_len).reshape(q_len, 1)
    j = np.arange(kv_len).reshape(1, kv_len)
    offset = (nonpad.reshape(-1, 1, 1) - q_len) if (nonpad is not None and past == 0) else past
    allowed = np.ones(np.broadcast_shapes(np.shape(offset), (q_len, kv_len)), bool)
    if causal:
        allowed = allowed & (j <= i + offset)
    if left >= 0 or right >= 0:
        diff = i + offset - j
        if left >= 0:
            allowed = allowed & (diff <= left)
        if right >= 0:
            allowed = allowed & (-diff <= right)
    if allowed.ndim == 3:
        allowed = allowed.reshape(allowed.shape[0], 1, q_len, kv_len)
    if nonpad is not None:
        padding = (np.arange(kv_len) < nonpad.reshape(-1, 1)).reshape(batch, 1, 1, kv_len)
        allowed = allowed & padding
    return np.where(allowed, np.float32(0), np.float32(-np.inf)).astype(np.float32)


@builder("Attention", inputs=(3, 7), outputs=4,
         attrs=[Attr("is_causal", "int", 0, (0, 1)), Attr("kv_num_heads", "int", None),
                Attr("q_num_heads", "int", None), Attr("qk_matmul_output_mode", "int", 0, (0, 1, 2, 3)),
                Attr("scale", "float", None), Attr("softcap", "float", 0.0),
                Attr("softmax_precision", "int", None),
                Attr("left_window_size", "int", -1), Attr("right_window_size", "int", -1)])
def attention(g, inputs, attrs):
    """softmax(Q K^T * scale (softcapped) + mask) V, with past keys and values appended,
    grouped-query heads repeated, causal and local-window masks; outputs Y, present key,
    present value and the chosen QK product. float16 and bfloat16 (and float64) operands are
    computed in float32: cast on the way in, and the outputs cast back."""
    dtype = g.type_of(inputs[0]).dtype
    if dtype == "float32":
        return _attention_float32(g, inputs, attrs)

    def wide(v: str) -> str:
        return g.add("Cast", [v], {"to": "float32"})[0] if v and g.type_of(v).dtype == dtype else v
    outputs = _attention_float32(g, [wide(v) for v in inputs], attrs)
    return [g.add("Cast", [o], {"to": dtype})[0] for o in outputs]


def _attention_float32(g, inputs, attrs):
    q, k, v = inputs[:3]
    mask, past_key, past_value, nonpad = (_present(inputs, i) for i in (3, 4, 5, 6))
    if (past_key is None) != (past_value is None):
        raise OpError("Attention takes past_key and past_value together", input=4 if past_key is None else 5)
    if nonpad is not None and past_key is not None:
        raise OpError("Attention cannot combine nonpad_kv_seqlen with past key and value", input=6)
    rank = len(g.type_of(q).shape)
    if rank == 3:
        if attrs["q_num_heads"] is None or attrs["kv_num_heads"] is None:
            raise OpError("Attention with rank-3 inputs needs q_num_heads and kv_num_heads", attr="q_num_heads")
        q = _heads_first(g, q, attrs["q_num_heads"], "Q", 0)
        k = _heads_first(g, k, attrs["kv_num_heads"], "K", 1)
        v = _heads_first(g, v, attrs["kv_num_heads"], "V", 2)
    elif rank != 4:
        raise OpError(f"Attention Q has rank {rank}, expected 3 or 4", input=0)
    batch, q_heads, q_len, head = g.type_of(q).shape
    scale = attrs["scale"] if attrs["scale"] is not None else 1 / np.sqrt(head)
    root = g.scalar(float(np.float32(np.sqrt(scale))))  # Q and K are each scaled by its root
    past = 0
    if past_key is not None:
        past = g.type_of(past_key).shape[2]
        k = g.add("Concat", [past_key, k], {"axis": 2})[0]
        v = g.add("Concat", [past_value, v], {"axis": 2})[0]
    present_key, present_value = k, v
    kv_heads, kv_len = g.type_of(k).shape[1], g.type_of(k).shape[2]
    if q_heads != kv_heads:
        if q_heads % kv_heads:
            raise OpError(f"Attention: {q_heads} query heads are not a multiple of {kv_heads} key/value heads",
                          input=1)
        repeat = g.constant(np.repeat(np.arange(kv_heads, dtype=np.int64), q_heads // kv_heads), "heads")
        k = g.add("Gather", [k, repeat], {"axis": 1})[0]
        v = g.add("Gather", [v, repeat], {"axis": 1})[0]
    lengths = None
    if nonpad is not None:
        lengths = g.value_of(nonpad)
        if lengths is None:
            raise OpError("Attention nonpad_kv_seqlen must be a constant, known when the graph is built", input=6)
        lengths = np.asarray(lengths, np.int64).reshape(-1)

    qk = g.add("MatMul", [g.add("Mul", [q, root])[0],
                          _transpose(g, g.add("Mul", [k, root])[0], [0, 1, 3, 2])])[0]
    if attrs["softcap"] > 0:
        cap = g.scalar(attrs["softcap"])
        qk = g.add("Mul", [g.add("Tanh", [g.add("Div", [qk, cap])[0]])[0], cap])[0]
    capped = qk

    # The additive bias: the mask (booleans as 0 / -inf, padded with -inf up to the keys'
    # length), plus the causal, window and padding parts known when the graph is built.
    bias = None
    if mask is not None:
        mask_type = g.type_of(mask)
        if mask_type.dtype == "bool":
            bias = g.add("Where", [mask, g.scalar(0.0), g.scalar(-np.inf)])[0]
        else:
            bias = mask
        width = mask_type.shape[-1]
        if width < kv_len:
            fill = np.full(tuple(mask_type.shape[:-1]) + (kv_len - width,), -np.inf, np.float32)
            bias = g.add("Concat", [bias, g.constant(fill, "padding")], {"axis": len(mask_type.shape) - 1})[0]
    fixed = _constant_bias(q_len, kv_len, batch, attrs, past, lengths)
    if fixed is not None:
        fixed_name = g.constant(fixed, "bias")
        bias = fixed_name if bias is None else g.add("Add", [bias, fixed_name])[0]
    with_bias = g.add("Add", [qk, bias])[0] if bias is not None else qk
    probabilities = g.add("Softmax", [with_bias], {"axis": -1})[0]
    if bias is not None:
        # A row whose every key is masked has no attendable key: its probabilities are 0.
        known = g.value_of(bias)
        if known is not None:
            masked = np.isneginf(np.max(known, axis=-1, keepdims=True))
            masked_name = g.constant(masked, "masked_rows") if masked.any() else None
        else:
            row_max = g.add("ReduceMax", [bias], {"axes": [-1], "keepdims": 1})[0]
            masked_name = g.add("IsInf", [row_max], {"detect_positive": 0})[0]
        if masked_name is not None:
            probabilities = g.add("Where", [masked_name, g.scalar(0.0), probabilities])[0]
    y = g.add("MatMul", [probabilities, v])[0]
    if rank == 3:
        y = _transpose(g, y, [0, 2, 1, 3])
        shape = g.type_of(y).shape
        y = _reshape(g, y, [shape[0], shape[1], shape[2] * shape[3]])
    mode = attrs["qk_matmul_output_mode"]
    qk_out = {0: qk, 1: capped, 2: with_bias, 3: probabilities}[mode]
    return [y, present_key, present_value, qk_out]
