"""Signal-processing tables: the window functions (HannWindow, HammingWindow, BlackmanWindow)
and MelWeightMatrix.

Their inputs are sizes and frequencies that fix the output's shape, so they are known when the
graph is built (`constant_inputs`) and so is the whole output: these primitives are always
evaluated by their reference at build time and become constants in flash, as a feature
extractor's window and filter bank would be written by hand. They need no kernel.
"""
from __future__ import annotations

import math

import numpy as np

from tinsmith.ir import TensorType
from tinsmith.ops.registry import Attr, InferArgs, OpError, define

# ONNX output_datatype: element types Tinsmith keeps these tables in
_FLOAT_TYPES = {1: "float32", 10: "float32", 11: "float32", 16: "float32"}


def _scalar(args: InferArgs, index: int, op: str, what: str):
    value = args.values[index]
    if value is None or np.asarray(value).size != 1:
        raise OpError(f"{op} {what} must be a scalar constant, known when the graph is built", input=index)
    return np.asarray(value).reshape(-1)[0].item()


def _output_dtype(attrs, op: str) -> str:
    code = attrs["output_datatype"]
    if code not in _FLOAT_TYPES:
        raise OpError(f"{op} output_datatype {code} is not a floating-point type Tinsmith computes with",
                      attr="output_datatype")
    return _FLOAT_TYPES[code]


# --- windows ---------------------------------------------------------------------------------
def _cosine_sum(coefficients: tuple[float, ...]):
    """w[n] = sum_k (-1)^k a_k cos(2 pi k n / N), N = size (periodic) or size - 1 (symmetric)."""
    def window(size: int, periodic: bool) -> np.ndarray:
        n = np.arange(size, dtype=np.float64)
        period = size if periodic else size - 1
        w = np.zeros(size)
        for k, a in enumerate(coefficients):
            w += (-1) ** k * a * np.cos(2 * math.pi * k * n / period) if period else a * (k == 0)
        return w
    return window


WINDOWS = {
    "HannWindow": _cosine_sum((0.5, 0.5)),
    "HammingWindow": _cosine_sum((25 / 46, 21 / 46)),
    "BlackmanWindow": _cosine_sum((0.42, 0.5, 0.08)),
}
_WINDOW_ATTRS = [Attr("output_datatype", "int", 1), Attr("periodic", "int", 1, (0, 1))]


def _window_size(args: InferArgs, op: str) -> int:
    size = _scalar(args, 0, op, "size")
    if int(size) != size or size < 0:
        raise OpError(f"{op} size {size} must be a non-negative integer", input=0)
    return int(size)


def _define_window(op: str) -> None:
    def infer(args: InferArgs) -> list[TensorType]:
        return [TensorType(_output_dtype(args.attrs, op), (_window_size(args, op),))]

    def reference(xs, attrs):
        size = int(np.asarray(xs[0]).reshape(-1)[0])
        return [WINDOWS[op](size, bool(attrs["periodic"])).astype(np.float32)]
    define(op, inputs=1, infer=infer, reference=reference, constant_inputs=[0], attrs=_WINDOW_ATTRS)


for _op in WINDOWS:
    _define_window(_op)


# --- MelWeightMatrix -------------------------------------------------------------------------
def _hz_to_mel(hz: float) -> float:
    return 2595 * math.log10(1 + hz / 700)


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    return 700 * (10 ** (mel / 2595) - 1)


def mel_weight_matrix(bins: int, dft_length: int, sample_rate: int, low_hz: float, high_hz: float) -> np.ndarray:
    """ONNX MelWeightMatrix, [dft_length // 2 + 1, bins]: triangular filters whose edges are
    num_mel_bins + 2 points spaced evenly on the mel scale (by (high - low) / (bins + 2), as the
    operator defines it), each rounded down to a DFT bin; a filter rises from its left edge to
    1 at its centre and falls to 0 at its right edge (a filter whose left edge is its centre
    is 1 there)."""
    low, high = _hz_to_mel(low_hz), _hz_to_mel(high_hz)
    step = (high - low) / (bins + 2)
    edges_hz = _mel_to_hz(np.arange(bins + 2) * step + low)
    edges = np.floor((dft_length + 1) * edges_hz / sample_rate).astype(np.int64)
    out = np.zeros((dft_length // 2 + 1, bins))
    for i in range(bins):
        left, centre, right = (int(e) for e in edges[i:i + 3])
        if centre == left:
            out[centre, i] = 1
        else:
            j = np.arange(left, centre + 1)
            out[j, i] = (j - left) / (centre - left)
        if right > centre:
            j = np.arange(centre, right)
            out[j, i] = (right - j) / (right - centre)
    return out


def _infer_mel(args: InferArgs) -> list[TensorType]:
    op = "MelWeightMatrix"
    names = ("num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz", "upper_edge_hertz")
    bins, length, rate, low, high = (_scalar(args, i, op, what) for i, what in enumerate(names))
    if bins <= 0 or length <= 0 or rate <= 0:
        raise OpError(f"{op} num_mel_bins, dft_length and sample_rate must be positive", input=0)
    if not 0 <= low < high <= rate / 2:
        raise OpError(f"{op} needs 0 <= lower_edge_hertz < upper_edge_hertz <= sample_rate / 2, "
                      f"got {low} and {high}", input=3)
    edges = np.floor((length + 1) * _mel_to_hz(np.array([_hz_to_mel(high)])) / rate)
    if edges[0] > length // 2:  # the top edge lands past the last bin of a dft_length transform
        raise OpError(f"{op} upper_edge_hertz {high} falls past the last of the {length // 2 + 1} bins", input=4)
    return [TensorType(_output_dtype(args.attrs, op), (int(length) // 2 + 1, int(bins)))]


def _mel_reference(xs, attrs):
    bins, length, rate, low, high = (np.asarray(x).reshape(-1)[0].item() for x in xs)
    return [mel_weight_matrix(int(bins), int(length), int(rate), float(low), float(high)).astype(np.float32)]


define("MelWeightMatrix", inputs=5, infer=_infer_mel, reference=_mel_reference, constant_inputs=[0, 1, 2, 3, 4],
       attrs=[Attr("output_datatype", "int", 1)])
