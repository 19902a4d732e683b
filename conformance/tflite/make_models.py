"""Write the TFLite single-operator conformance models (conformance/tflite/models/NAME.tflite) and
their seeded inputs (NAME.npz, arrays keyed by input tensor name), without TensorFlow: the
flatbuffers come from tests/tflite_writer.py. Run it again after changing a case:

    python conformance/tflite/make_models.py

Each case is one builtin operator (a few need a second: SHAPE feeds a RESHAPE) in one attribute
variant and element type. Inputs lie where the operator is defined (positive for LOG, SQRT, ...);
int8 inputs cover the whole range.
"""
from __future__ import annotations

import sys
import zlib
from pathlib import Path
from typing import Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from tflite_recurrent_models import (accumulator, branch, counted_loop, lstm_16x8, lstm_float, lstm_int8,  # noqa: E402
                                     svdf_float, svdf_int8)
from tflite_writer import Op, Tensor, conv_options, model  # noqa: E402  (the tests' writer, found through sys.path)

MODELS = Path(__file__).resolve().parent / "models"
Q = (0.05, 3)  # an int8 quantization shared by inputs and outputs that move elements


class Case:
    """One model being written: tensors, operators, graph inputs with their seeded data."""

    def __init__(self, name: str):
        self.name = name
        self.tensors: list[Tensor] = []
        self.ops: list[Op] = []
        self.inputs: list[int] = []
        self.outputs: list[int] = []
        self.feeds: dict[str, np.ndarray] = {}
        self.rng = np.random.default_rng(zlib.crc32(name.encode()))
        self.raw: bytes | None = None  # a model written elsewhere (the recurrent operators')

    def add(self, name, dtype, shape, data=None, quant=None) -> int:
        self.tensors.append(Tensor(name, dtype, list(shape), data, quant))
        return len(self.tensors) - 1

    def input(self, name, dtype, shape, lo=-3.0, hi=3.0, quant=None) -> int:
        if dtype == "bool":
            data = self.rng.integers(0, 2, shape).astype(bool)
        elif dtype in ("uint8", "int16"):  # quantized data over its whole range
            info = np.iinfo(dtype)
            data = self.rng.integers(info.min, info.max + 1, shape).astype(dtype)
        elif dtype in ("uint32", "uint64"):  # the signal library's spectra, over the whole range
            data = self.rng.integers(0, np.iinfo(dtype).max, shape, dtype=dtype, endpoint=True)
        elif dtype in ("int8", "int32"):
            info = np.iinfo(np.int8)  # (int32 inputs: small values, indices or counts stay in range)
            data = self.rng.integers(max(info.min, int(lo)) if dtype == "int32" else info.min,
                                     min(info.max, int(hi)) + 1 if dtype == "int32" else info.max + 1,
                                     shape).astype(dtype)
        else:
            data = self.rng.uniform(lo, hi, shape).astype(dtype)
        self.feeds[name] = data
        self.inputs.append(self.add(name, dtype, shape, quant=quant))
        return self.inputs[-1]

    def const(self, name, data, dtype=None, quant=None) -> int:
        data = np.asarray(data, dtype or np.asarray(data).dtype)
        return self.add(name, str(data.dtype), data.shape, data, quant)

    def weights(self, name, shape, scale=0.5) -> int:
        return self.const(name, self.rng.normal(0, scale, shape).astype(np.float32))

    def op(self, code, ins, outs, options=None, **custom_options) -> None:
        """A builtin operator, or with code "CUSTOM:name" a custom one with FlexBuffers options."""
        if str(code).startswith("CUSTOM:"):
            self.ops.append(Op("CUSTOM", ins, outs, custom=code.partition(":")[2], custom_options=custom_options))
        else:
            self.ops.append(Op(code, ins, outs, options))

    def output(self, name, dtype, shape, quant=None) -> int:
        self.outputs.append(self.add(name, dtype, shape, quant=quant))
        return self.outputs[-1]

    def write(self, folder: Path) -> None:
        data = self.raw if self.raw is not None else model(self.tensors, self.ops, self.inputs, self.outputs)
        (folder / f"{self.name}.tflite").write_bytes(data)
        np.savez(folder / f"{self.name}.npz", **self.feeds)


CASES: dict[str, Callable[[Case], None]] = {}


def case(name: str):
    def register(fn):
        CASES[name] = fn
        return fn
    return register


def unary(name, code, lo=-3.0, hi=3.0, options=None, dtype="float32", shape=(2, 3, 5), out_dtype=None,
          quant=None, y_quant=None):
    def build(c: Case):
        x = c.input("x", dtype, shape, lo, hi, quant)
        c.op(code, [x], [c.output("y", out_dtype or dtype, shape, y_quant or quant)], options)
    CASES[name] = build


def binary(name, code, b_shape=(3, 1), lo=-3.0, hi=3.0, b_lo=-3.0, b_hi=3.0, options=None, dtype="float32",
           out_dtype=None, a_shape=(2, 3, 4), quant=None, const_b=False):
    def build(c: Case):
        a = c.input("a", dtype, a_shape, lo, hi, quant)
        if const_b:
            b = c.const("b", c.rng.uniform(b_lo, b_hi, b_shape).astype(dtype))
        else:
            b = c.input("b", dtype, b_shape, b_lo, b_hi, quant)
        shape = np.broadcast_shapes(a_shape, b_shape)
        c.op(code, [a, b], [c.output("y", out_dtype or dtype, shape, quant)], options)
    CASES[name] = build


# --- elementwise float32 --------------------------------------------------------------------
for _code in ("RELU", "RELU6", "RELU_N1_TO_1", "LOGISTIC", "TANH", "HARD_SWISH", "ELU", "EXP", "SIN", "COS",
              "FLOOR", "CEIL", "ROUND", "ABS", "NEG", "SQUARE", "LOG_SOFTMAX", "L2_NORMALIZATION", "SIGN",
              "RELU_0_TO_1"):
    unary(f"{_code.lower()}_float32", _code)
for _code in ("LOG", "SQRT", "RSQRT"):
    unary(f"{_code.lower()}_float32", _code, lo=0.05, hi=4.0)
unary("softmax_beta_float32", "SOFTMAX", options=("SoftmaxOptions", {"Beta": 0.5}))
unary("softmax_float32", "SOFTMAX", options=("SoftmaxOptions", {"Beta": 1.0}))
unary("leaky_relu_float32", "LEAKY_RELU", options=("LeakyReluOptions", {"Alpha": 0.2}))
unary("gelu_float32", "GELU", options=("GeluOptions", {"Approximate": False}))
unary("gelu_tanh_float32", "GELU", options=("GeluOptions", {"Approximate": True}))
unary("cast_float32_to_int32", "CAST", lo=-50, hi=50, out_dtype="int32")
unary("cast_int32_to_float32", "CAST", dtype="int32", lo=-100, hi=100, out_dtype="float32")
unary("logical_not_bool", "LOGICAL_NOT", dtype="bool")
unary("leaky_relu_int8", "LEAKY_RELU", dtype="int8", quant=(0.04, -10), options=("LeakyReluOptions", {"Alpha": 0.3}))
unary("relu6_int8", "RELU6", dtype="int8", quant=(0.03, -20))
unary("relu6_saturated_int8", "RELU6", dtype="int8", quant=(0.02, 10))
# TFLite's fixed-point RSQRT, L2_NORMALIZATION, LOG_SOFTMAX (int8 output 16/256 from 127) and
# SQUARED_DIFFERENCE; RSQRT's inputs lie at or above the zero point (TFLite Micro refuses the others)
unary("rsqrt_int8", "RSQRT", dtype="int8", quant=(0.04, -128), y_quant=(0.02, -100))
unary("l2_normalization_int8", "L2_NORMALIZATION", dtype="int8", quant=(0.05, 3), y_quant=(1 / 128, 0),
      options=("L2NormOptions", {}))
unary("log_softmax_int8", "LOG_SOFTMAX", dtype="int8", quant=(0.1, -5), y_quant=(16 / 256, 127))
binary("squared_difference_int32", "SQUARED_DIFFERENCE", dtype="int32", lo=-100, hi=100, b_lo=-100, b_hi=100)


@case("rsqrt_int16")
def _rsqrt_int16(c: Case):
    x = c.input("x", "int16", (2, 3, 5), quant=(0.001, 0))
    c.feeds["x"] = np.abs(c.feeds["x"].astype(np.int32)).clip(0, 32767).astype(np.int16)
    c.op("RSQRT", [x], [c.output("y", "int16", (2, 3, 5), quant=(0.0005, 0))])


for _dtype, _quants in (("int8", ((0.05, 3), (0.08, -7), (0.3, -100))), ("int16", ((0.001, 0), (0.0015, 0), (0.01, 0)))):
    def _squared_difference(c: Case, dtype=_dtype, quants=_quants):
        a, b = c.input("a", dtype, (2, 3, 4), quant=quants[0]), c.input("b", dtype, (3, 1), quant=quants[1])
        c.op("SQUARED_DIFFERENCE", [a, b], [c.output("y", dtype, (2, 3, 4), quant=quants[2])])
    CASES[f"squared_difference_{_dtype}"] = _squared_difference

# --- binary float32, NumPy broadcasting -------------------------------------------------------
binary("add_float32", "ADD", options=("AddOptions", {}))
binary("add_relu6_float32", "ADD", options=("AddOptions", {"FusedActivationFunction": 3}))
binary("sub_float32", "SUB", b_shape=(4,), options=("SubOptions", {}))
binary("sub_relu_float32", "SUB", b_shape=(2, 3, 4), options=("SubOptions", {"FusedActivationFunction": 1}))
binary("mul_float32", "MUL", options=("MulOptions", {}))
binary("mul_relu_n1_to_1_float32", "MUL", b_shape=(1,), const_b=True,
       options=("MulOptions", {"FusedActivationFunction": 2}))
binary("div_float32", "DIV", b_lo=0.5, b_hi=2.0, options=("DivOptions", {}))
binary("floor_div_float32", "FLOOR_DIV", b_lo=0.5, b_hi=2.0)
binary("maximum_float32", "MAXIMUM")
binary("minimum_float32", "MINIMUM", b_shape=(2, 3, 4))
binary("squared_difference_float32", "SQUARED_DIFFERENCE")
binary("pow_float32", "POW", lo=0.1, hi=2.0, b_lo=-2.0, b_hi=2.0)
binary("prelu_float32", "PRELU", b_shape=(4,), const_b=True)
binary("add_int32", "ADD", dtype="int32", lo=-100, hi=100, b_lo=-100, b_hi=100, options=("AddOptions", {}))
binary("sub_int32", "SUB", dtype="int32", lo=-100, hi=100, b_lo=-100, b_hi=100, options=("SubOptions", {}))
binary("mul_int32", "MUL", dtype="int32", lo=-100, hi=100, b_lo=-100, b_hi=100, options=("MulOptions", {}))
binary("maximum_int8", "MAXIMUM", b_shape=(2, 3, 4), dtype="int8", quant=Q)
binary("minimum_int8", "MINIMUM", b_shape=(2, 3, 4), dtype="int8", quant=Q)
for _code in ("LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL", "EQUAL", "NOT_EQUAL"):
    binary(f"{_code.lower()}_float32", _code, out_dtype="bool")
    binary(f"{_code.lower()}_int32", _code, dtype="int32", lo=-3, hi=3, b_lo=-3, b_hi=3, out_dtype="bool")
binary("less_int8", "LESS", b_shape=(2, 3, 4), dtype="int8", quant=Q, out_dtype="bool")
binary("logical_and_bool", "LOGICAL_AND", dtype="bool")
binary("logical_or_bool", "LOGICAL_OR", dtype="bool")


@case("select_v2_float32")
def _select(c: Case):
    cond = c.input("cond", "bool", (2, 3, 4))
    a, b = c.input("a", "float32", (2, 3, 4)), c.input("b", "float32", (3, 1))
    c.op("SELECT_V2", [cond, a, b], [c.output("y", "float32", (2, 3, 4))])


@case("add_n_float32")
def _add_n(c: Case):
    xs = [c.input(f"x{i}", "float32", (2, 5)) for i in range(3)]
    c.op("ADD_N", xs, [c.output("y", "float32", (2, 5))])


# --- convolutions, matrix products, pools (float32, NHWC) ------------------------------------
def conv(name, x_shape, w_shape, y_shape, options, bias=True, depthwise=False):
    def build(c: Case):
        x = c.input("x", "float32", x_shape)
        ins = [x, c.weights("w", w_shape)]
        if bias:
            ins.append(c.weights("b", (w_shape[0] if not depthwise else w_shape[3],)))
        c.op("DEPTHWISE_CONV_2D" if depthwise else "CONV_2D", ins, [c.output("y", "float32", y_shape)], options)
    CASES[name] = build


conv("conv_2d_same_stride2_relu_float32", (1, 7, 8, 3), (4, 3, 3, 3), (1, 4, 4, 4),
     ("Conv2DOptions", {"Padding": 0, "StrideH": 2, "StrideW": 2, "FusedActivationFunction": 1}))
conv("conv_2d_valid_dilated_float32", (1, 9, 9, 2), (5, 3, 3, 2), (1, 5, 5, 5),
     ("Conv2DOptions", {"Padding": 1, "StrideH": 1, "StrideW": 1, "DilationHFactor": 2, "DilationWFactor": 2}))
conv("conv_2d_1x1_no_bias_float32", (1, 5, 6, 8), (3, 1, 1, 8), (1, 5, 6, 3),
     ("Conv2DOptions", {"Padding": 1, "StrideH": 1, "StrideW": 1}), bias=False)
conv("depthwise_conv_2d_same_relu6_float32", (1, 6, 7, 4), (1, 3, 3, 4), (1, 6, 7, 4),
     ("DepthwiseConv2DOptions", {"Padding": 0, "StrideH": 1, "StrideW": 1, "DepthMultiplier": 1,
                                 "FusedActivationFunction": 3}), depthwise=True)
conv("depthwise_conv_2d_multiplier2_float32", (1, 7, 7, 3), (1, 3, 3, 6), (1, 3, 3, 6),
     ("DepthwiseConv2DOptions", {"Padding": 1, "StrideH": 2, "StrideW": 2, "DepthMultiplier": 2}), depthwise=True)


@case("fully_connected_float32")
def _fc(c: Case):
    x = c.input("x", "float32", (2, 6))
    c.op("FULLY_CONNECTED", [x, c.weights("w", (4, 6)), c.weights("b", (4,))], [c.output("y", "float32", (2, 4))],
         ("FullyConnectedOptions", {"FusedActivationFunction": 1}))


@case("fully_connected_keep_dims_float32")
def _fc_keep(c: Case):
    x = c.input("x", "float32", (2, 3, 6))
    c.op("FULLY_CONNECTED", [x, c.weights("w", (5, 6)), -1], [c.output("y", "float32", (2, 3, 5))],
         ("FullyConnectedOptions", {"KeepNumDims": True}))


@case("batch_matmul_float32")
def _bmm(c: Case):
    a, b = c.input("a", "float32", (2, 3, 4)), c.input("b", "float32", (2, 5, 4))
    c.op("BATCH_MATMUL", [a, b], [c.output("y", "float32", (2, 3, 5))], ("BatchMatMulOptions", {"AdjY": True}))


@case("transpose_conv_same_stride2_float32")
def _tconv(c: Case):
    x = c.input("x", "float32", (1, 4, 5, 3))
    shape = c.const("output_shape", np.array([1, 8, 10, 2], np.int32))
    c.op("TRANSPOSE_CONV", [shape, c.weights("w", (2, 3, 3, 3)), x, c.weights("b", (2,))],
         [c.output("y", "float32", (1, 8, 10, 2))], ("TransposeConvOptions", {"Padding": 0, "StrideH": 2, "StrideW": 2}))


@case("transpose_conv_valid_float32")
def _tconv_valid(c: Case):
    x = c.input("x", "float32", (1, 3, 4, 2))
    shape = c.const("output_shape", np.array([1, 7, 9, 3], np.int32))
    c.op("TRANSPOSE_CONV", [shape, c.weights("w", (3, 3, 3, 2)), x],
         [c.output("y", "float32", (1, 7, 9, 3))], ("TransposeConvOptions", {"Padding": 1, "StrideH": 2, "StrideW": 2}))


def pool(name, code, x_shape, y_shape, padding, k, s, act=0):
    def build(c: Case):
        x = c.input("x", "float32", x_shape)
        c.op(code, [x], [c.output("y", "float32", y_shape)],
             ("Pool2DOptions", {"Padding": padding, "FilterHeight": k, "FilterWidth": k, "StrideH": s, "StrideW": s,
                                "FusedActivationFunction": act}))
    CASES[name] = build


pool("average_pool_2d_same_float32", "AVERAGE_POOL_2D", (1, 7, 6, 3), (1, 4, 3, 3), 0, 3, 2)
pool("max_pool_2d_valid_relu_float32", "MAX_POOL_2D", (1, 7, 6, 3), (1, 3, 2, 3), 1, 3, 2, act=1)

# --- moving and selecting elements -------------------------------------------------------------
def shaped(name, code, x_shape, y_shape, consts=(), options=None, dtype="float32", quant=None, out_dtype=None):
    """x and constant operands (int32 arrays) -> y."""
    def build(c: Case):
        x = c.input("x", dtype, x_shape, quant=quant)
        ins = [x] + [c.const(f"operand{i}", np.asarray(v, np.int32)) for i, v in enumerate(consts)]
        c.op(code, ins, [c.output("y", out_dtype or dtype, y_shape, quant)], options)
    CASES[name] = build


for _dtype, _quant in (("float32", None), ("int8", Q)):
    shaped(f"transpose_{_dtype}", "TRANSPOSE", (2, 3, 4, 5), (2, 5, 3, 4), [[0, 3, 1, 2]], dtype=_dtype, quant=_quant)
    shaped(f"reshape_{_dtype}", "RESHAPE", (2, 3, 4), (6, 4), [[6, 4]], dtype=_dtype, quant=_quant)
    shaped(f"strided_slice_{_dtype}", "STRIDED_SLICE", (4, 6, 5), (2, 6, 3), [[1, 0, -1], [4, 0, 0], [2, 1, -2]],
           ("StridedSliceOptions", {"BeginMask": 2, "EndMask": 6}), dtype=_dtype, quant=_quant)
    shaped(f"depth_to_space_{_dtype}", "DEPTH_TO_SPACE", (1, 2, 3, 8), (1, 4, 6, 2),
           options=("DepthToSpaceOptions", {"BlockSize": 2}), dtype=_dtype, quant=_quant)
    shaped(f"arg_max_{_dtype}", "ARG_MAX", (2, 3, 7), (2, 3), [[-1]], ("ArgMaxOptions", {"OutputType": 2}),
           dtype=_dtype, quant=_quant, out_dtype="int32")
    shaped(f"reduce_max_{_dtype}", "REDUCE_MAX", (2, 3, 4), (2, 1, 4), [[1]], ("ReducerOptions", {"KeepDims": True}),
           dtype=_dtype, quant=_quant)
    shaped(f"gather_{_dtype}", "GATHER", (4, 5, 3), (4, 3, 3), [[4, 0, 2]], ("GatherOptions", {"Axis": 1}),
           dtype=_dtype, quant=_quant)
    shaped(f"space_to_batch_nd_{_dtype}", "SPACE_TO_BATCH_ND", (1, 5, 4, 3), (4, 3, 3, 3),
           [[2, 2], [[1, 0], [1, 1]]], dtype=_dtype, quant=_quant)
    shaped(f"batch_to_space_nd_{_dtype}", "BATCH_TO_SPACE_ND", (4, 3, 3, 2), (1, 5, 5, 2),
           [[2, 2], [[1, 0], [0, 1]]], dtype=_dtype, quant=_quant)
    shaped(f"reverse_v2_{_dtype}", "REVERSE_V2", (2, 3, 4), (2, 3, 4), [[1]], dtype=_dtype, quant=_quant)
shaped("mirror_pad_reflect_float32", "MIRROR_PAD", (2, 3, 4), (2, 6, 5), [[[0, 0], [2, 1], [1, 0]]],
       ("MirrorPadOptions", {"Mode": 0}))
shaped("mirror_pad_reflect_int8", "MIRROR_PAD", (2, 3, 4), (2, 6, 5), [[[0, 0], [2, 1], [1, 0]]],
       ("MirrorPadOptions", {"Mode": 0}), dtype="int8", quant=Q)
binary("floor_mod_float32", "FLOOR_MOD", b_lo=0.5, b_hi=2.0)
shaped("squeeze_float32", "SQUEEZE", (1, 3, 1, 4), (3, 4), options=("SqueezeOptions", {"SqueezeDims": [0, 2]}))
shaped("expand_dims_float32", "EXPAND_DIMS", (3, 4), (3, 1, 4), [[1]])
shaped("slice_float32", "SLICE", (4, 6, 5), (2, 3, 5), [[1, 2, 0], [2, 3, -1]])
shaped("strided_slice_shrink_negative_stride_float32", "STRIDED_SLICE", (4, 6, 5), (3, 3),
       [[2, -1, 0], [3, 0, 5], [1, -2, 2]], ("StridedSliceOptions", {"ShrinkAxisMask": 1}))
shaped("strided_slice_ellipsis_new_axis_float32", "STRIDED_SLICE", (4, 6, 5), (4, 6, 1, 2),
       [[0, 0, 1], [0, 0, 5], [1, 1, 2]], ("StridedSliceOptions", {"EllipsisMask": 1, "NewAxisMask": 2}))
shaped("strided_slice_short_spec_float32", "STRIDED_SLICE", (4, 6, 5), (2, 6, 5), [[1], [3], [1]],
       ("StridedSliceOptions", {}))
shaped("space_to_depth_float32", "SPACE_TO_DEPTH", (1, 4, 6, 2), (1, 2, 3, 8),
       options=("SpaceToDepthOptions", {"BlockSize": 2}))
shaped("arg_min_float32", "ARG_MIN", (2, 3, 7), (2, 7), [[1]], ("ArgMinOptions", {"OutputType": 2}),
       out_dtype="int32")
shaped("mean_float32", "MEAN", (2, 3, 4, 5), (2, 5), [[1, 2]], ("ReducerOptions", {"KeepDims": False}))
shaped("mean_keep_dims_float32", "MEAN", (2, 3, 4, 5), (2, 3, 4, 1), [[-1]], ("ReducerOptions", {"KeepDims": True}))
shaped("sum_float32", "SUM", (2, 3, 4), (4,), [[0, 1]], ("ReducerOptions", {"KeepDims": False}))
shaped("reduce_min_float32", "REDUCE_MIN", (2, 3, 4), (2, 3), [[2]], ("ReducerOptions", {"KeepDims": False}))
shaped("reduce_prod_float32", "REDUCE_PROD", (2, 3, 4), (2, 4), [[1]], ("ReducerOptions", {"KeepDims": False}))
shaped("pad_float32", "PAD", (2, 3, 4), (3, 6, 4), [[[1, 0], [2, 1], [0, 0]]])
shaped("broadcast_to_float32", "BROADCAST_TO", (3, 1), (2, 3, 4), [[2, 3, 4]])
shaped("cumsum_float32", "CUMSUM", (3, 5), (3, 5), [[1]], ("CumsumOptions", {"Exclusive": False, "Reverse": True}))
shaped("resize_nearest_neighbor_float32", "RESIZE_NEAREST_NEIGHBOR", (1, 3, 4, 2), (1, 5, 7, 2), [[5, 7]],
       ("ResizeNearestNeighborOptions", {}))
for _variant, _options in (("", {}), ("_half_pixel", {"HalfPixelCenters": True}),
                           ("_align_corners", {"AlignCorners": True})):
    shaped(f"resize_nearest_neighbor{_variant}_int8", "RESIZE_NEAREST_NEIGHBOR", (1, 3, 4, 2), (1, 5, 7, 2),
           [[5, 7]], ("ResizeNearestNeighborOptions", _options), dtype="int8", quant=Q)
shaped("resize_nearest_neighbor_down_int8", "RESIZE_NEAREST_NEIGHBOR", (1, 7, 9, 2), (1, 3, 4, 2),
       [[3, 4]], ("ResizeNearestNeighborOptions", {"HalfPixelCenters": True}), dtype="int8", quant=Q)
shaped("resize_bilinear_float32", "RESIZE_BILINEAR", (1, 3, 4, 2), (1, 5, 7, 2), [[5, 7]],
       ("ResizeBilinearOptions", {}))
shaped("resize_bilinear_half_pixel_float32", "RESIZE_BILINEAR", (1, 3, 4, 2), (1, 6, 9, 2), [[6, 9]],
       ("ResizeBilinearOptions", {"HalfPixelCenters": True}))
shaped("resize_bilinear_align_corners_float32", "RESIZE_BILINEAR", (1, 3, 4, 2), (1, 5, 7, 2), [[5, 7]],
       ("ResizeBilinearOptions", {"AlignCorners": True}))
for _variant, _options in (("", {}), ("_half_pixel", {"HalfPixelCenters": True}),
                           ("_align_corners", {"AlignCorners": True})):
    shaped(f"resize_bilinear{_variant}_int8", "RESIZE_BILINEAR", (1, 3, 4, 2), (1, 7, 9, 2), [[7, 9]],
           ("ResizeBilinearOptions", _options), dtype="int8", quant=Q)
shaped("resize_bilinear_down_half_pixel_int8", "RESIZE_BILINEAR", (1, 7, 9, 3), (1, 3, 4, 3), [[3, 4]],
       ("ResizeBilinearOptions", {"HalfPixelCenters": True}), dtype="int8", quant=Q)
shaped("resize_nearest_neighbor_half_pixel_float32", "RESIZE_NEAREST_NEIGHBOR", (1, 3, 4, 2), (1, 5, 7, 2), [[5, 7]],
       ("ResizeNearestNeighborOptions", {"HalfPixelCenters": True}))
shaped("resize_nearest_neighbor_align_corners_float32", "RESIZE_NEAREST_NEIGHBOR", (1, 3, 4, 2), (1, 5, 7, 2),
       [[5, 7]], ("ResizeNearestNeighborOptions", {"AlignCorners": True}))
shaped("tile_float32", "TILE", (2, 3), (4, 9), [[2, 3]])


def _padv2(dtype: str, value, quant=None):
    def build(c: Case):
        x = c.input("x", dtype, (2, 3), quant=quant)
        c.op("PADV2", [x, c.const("pads", np.array([[0, 1], [2, 0]], np.int32)),
                       c.const("value", np.array([value], dtype), quant=quant)],
             [c.output("y", dtype, (3, 5), quant=quant)])
    return build


CASES["padv2_float32"] = _padv2("float32", 1.5)
CASES["padv2_int8"] = _padv2("int8", -7, Q)  # TFLite: the value quantized as the input
CASES["padv2_int16"] = _padv2("int16", 300, (0.002, 0))


@case("gather_nd_float32")
def _gather_nd(c: Case):
    x = c.input("x", "float32", (4, 5, 3))
    c.op("GATHER_ND", [x, c.const("indices", np.array([[1, 2], [3, 0]], np.int32))], [c.output("y", "float32", (2, 3))])


def _split(c: Case, code: str, dtype: str, quant):
    x = c.input("x", dtype, (2, 9, 3), quant=quant)
    sizes = [2, 3, 4] if code == "SPLIT_V" else [3, 3, 3]
    outs = [c.output(f"y{i}", dtype, (2, s, 3), quant) for i, s in enumerate(sizes)]
    if code == "SPLIT":
        c.op(code, [c.const("axis", np.int32([1])), x], outs, ("SplitOptions", {"NumSplits": 3}))
    else:
        c.op(code, [x, c.const("sizes", np.int32([2, -1, 4])), c.const("axis", np.int32([-2]))], outs,
             ("SplitVOptions", {"NumSplits": 3}))


CASES["split_float32"] = lambda c: _split(c, "SPLIT", "float32", None)
CASES["split_int8"] = lambda c: _split(c, "SPLIT", "int8", Q)
CASES["split_v_float32"] = lambda c: _split(c, "SPLIT_V", "float32", None)


def _pack(c: Case, dtype: str, quant):
    xs = [c.input(f"x{i}", dtype, (3, 4), quant=quant) for i in range(2)]
    c.op("PACK", xs, [c.output("y", dtype, (3, 2, 4), quant)], ("PackOptions", {"ValuesCount": 2, "Axis": 1}))


def _unpack(c: Case, dtype: str, quant):
    x = c.input("x", dtype, (3, 2, 4), quant=quant)
    c.op("UNPACK", [x], [c.output(f"y{i}", dtype, (3, 4), quant) for i in range(2)],
         ("UnpackOptions", {"Num": 2, "Axis": -2}))


def _concat(c: Case, dtype: str, quant):
    xs = [c.input("x0", dtype, (2, 3, 4), quant=quant), c.input("x1", dtype, (2, 1, 4), quant=quant)]
    c.op("CONCATENATION", xs, [c.output("y", dtype, (2, 4, 4), quant)], ("ConcatenationOptions", {"Axis": 1}))


for _dtype, _quant in (("float32", None), ("int8", Q)):
    CASES[f"pack_{_dtype}"] = lambda c, d=_dtype, q=_quant: _pack(c, d, q)
    CASES[f"unpack_{_dtype}"] = lambda c, d=_dtype, q=_quant: _unpack(c, d, q)
    CASES[f"concatenation_{_dtype}"] = lambda c, d=_dtype, q=_quant: _concat(c, d, q)


@case("shape_reshape_float32")
def _shape(c: Case):
    x, z = c.input("x", "float32", (2, 3, 4)), c.input("z", "float32", (4, 3, 2))
    s = c.add("shape", "int32", (3,))
    c.op("SHAPE", [x], [s], ("ShapeOptions", {"OutType": 2}))
    c.op("RESHAPE", [z, s], [c.output("y", "float32", (2, 3, 4))])


shaped("reduce_any_bool", "REDUCE_ANY", (2, 3, 4), (2, 4), [[1]], ("ReducerOptions", {"KeepDims": False}),
       dtype="bool")
shaped("reduce_all_bool", "REDUCE_ALL", (2, 3, 4), (2, 3, 1), [[2]], ("ReducerOptions", {"KeepDims": True}),
       dtype="bool")


@case("select_float32")
def _select_v1(c: Case):
    cond = c.input("cond", "bool", (2, 3, 4))
    a, b = c.input("a", "float32", (2, 3, 4)), c.input("b", "float32", (2, 3, 4))
    c.op("SELECT", [cond, a, b], [c.output("y", "float32", (2, 3, 4))])


@case("zeros_like_add_float32")
def _zeros_like(c: Case):
    x = c.input("x", "float32", (2, 3))
    zeros = c.add("zeros", "float32", (2, 3))
    c.op("ZEROS_LIKE", [x], [zeros])
    c.op("ADD", [zeros, x], [c.output("y", "float32", (2, 3))], ("AddOptions", {}))


@case("fill_rank_range_int32")
def _folded(c: Case):
    """Shapes folded at build time, each a graph output: FILL, RANK of the input, RANGE."""
    x = c.input("x", "int32", (2, 3, 4))
    c.op("FILL", [c.const("dims", np.int32([2, 3])), c.const("value", np.int32(7))], [c.output("filled", "int32", (2, 3))])
    c.op("RANK", [x], [c.output("rank", "int32", ())])
    c.op("RANGE", [c.const("start", np.int32(2)), c.const("limit", np.int32(11)), c.const("delta", np.int32(3))],
         [c.output("range", "int32", (3,))])


@case("embedding_lookup_float32")
def _embedding(c: Case):
    ids = c.input("ids", "int32", (3,), lo=0, hi=4)
    c.op("EMBEDDING_LOOKUP", [ids, c.weights("table", (5, 4))], [c.output("y", "float32", (3, 4))])


# --- quantized (int8) -------------------------------------------------------------------------------
@case("quantize_dequantize_int8")
def _qdq(c: Case):
    x = c.input("x", "float32", (2, 8), lo=-8, hi=8)
    q = c.add("q", "int8", (2, 8), quant=(0.06, -5))
    c.op("QUANTIZE", [x], [q])
    c.op("DEQUANTIZE", [q], [c.output("y", "float32", (2, 8))])


@case("conv_2d_int8")
def _conv_int8(c: Case):
    x = c.input("x", "int8", (1, 6, 5, 3), quant=(0.05, -3))
    w = c.const("w", c.rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8),
                quant=([0.01, 0.02, 0.015, 0.03], [0, 0, 0, 0]))
    b = c.const("b", c.rng.integers(-500, 500, (4,)).astype(np.int32),
                quant=([0.05 * s for s in (0.01, 0.02, 0.015, 0.03)], [0, 0, 0, 0]))
    c.op("CONV_2D", [x, w, b], [c.output("y", "int8", (1, 3, 3, 4), quant=(0.2, 4))],
         ("Conv2DOptions", {"Padding": 0, "StrideH": 2, "StrideW": 2, "FusedActivationFunction": 1}))


@case("add_int8")
def _add_int8(c: Case):
    a, b = c.input("a", "int8", (2, 3, 4), quant=(0.05, 3)), c.input("b", "int8", (2, 3, 4), quant=(0.08, -7))
    c.op("ADD", [a, b], [c.output("y", "int8", (2, 3, 4), quant=(0.1, 1))], ("AddOptions", {}))


# --- TFLite Micro's signal library (custom operators; codegen/ops/tflm_signal.py) ---------------
@case("signal_window_int16")
def _signal_window(c: Case):
    x = c.input("x", "int16", (2, 32))
    w = c.const("w", np.round(np.hanning(32) * 4096).astype(np.int16))
    c.op("CUSTOM:SignalWindow", [x, w], [c.output("y", "int16", (2, 32))], shift=12)


@case("signal_fft_auto_scale_int16")
def _signal_auto_scale(c: Case):
    x = c.input("x", "int16", (64,))
    c.feeds["x"] >>= 6  # quiet: the frame is shifted up
    c.op("CUSTOM:SignalFftAutoScale", [x], [c.output("y", "int16", (64,)), c.output("shift", "int32", ())])


def _signal_rfft(dtype: str, code: int, length: int, frame: int):
    def build(c: Case):
        x = c.input("x", dtype, (2, frame), -1000.0, 1000.0)
        if dtype == "int32":
            c.feeds["x"] = c.rng.integers(-2 ** 31, 2 ** 31, (2, frame)).astype(np.int32)
        c.op("CUSTOM:SignalRfft", [x], [c.output("y", dtype, (2, length + 2))], T=code, fft_length=length)
    CASES[f"signal_rfft_{length}_{dtype}"] = build


for _dtype, _code in (("int16", 7), ("int32", 2), ("float32", 0)):
    _signal_rfft(_dtype, _code, 512, 480)
_signal_rfft("int16", 7, 64, 64)


def _signal_irfft(dtype: str, code: int, length: int):
    def build(c: Case):
        x = c.input("x", dtype, (2, length + 2), -1000.0, 1000.0)
        if dtype == "int32":
            c.feeds["x"] = c.rng.integers(-2 ** 31, 2 ** 31, (2, length + 2)).astype(np.int32)
        c.op("CUSTOM:SignalIrfft", [x], [c.output("y", dtype, (2, length))], T=code, fft_length=length)
    CASES[f"signal_irfft_{length}_{dtype}"] = build


for _dtype, _code in (("int16", 7), ("int32", 2), ("float32", 0)):
    _signal_irfft(_dtype, _code, 256)


@case("signal_delay_int16")
def _signal_delay(c: Case):
    x = c.input("x", "int16", (2, 16))
    c.op("CUSTOM:SignalDelay", [x], [c.output("y", "int16", (2, 16))], delay_length=5)


@case("signal_framer_int16")
def _signal_framer(c: Case):
    x = c.input("x", "int16", (2, 160))
    c.op("CUSTOM:SignalFramer", [x], [c.output("y", "int16", (2, 2, 200)), c.output("valid", "bool", ())],
         frame_size=200, frame_step=80, prefill=True)


@case("signal_stacker_int16")
def _signal_stacker(c: Case):
    x = c.input("x", "int16", (8,))
    c.op("CUSTOM:SignalStacker", [x], [c.output("y", "int16", (24,)), c.output("valid", "bool", ())],
         num_channels=8, stacker_left_context=2, stacker_right_context=0, stacker_step=1)


@case("signal_overlap_add_int16")
def _signal_overlap_add(c: Case):
    x = c.input("x", "int16", (2, 3, 16))
    c.op("CUSTOM:SignalOverlapAdd", [x], [c.output("y", "int16", (2, 12))], T=7, frame_step=4)


@case("signal_overlap_add_float32")
def _signal_overlap_add_float(c: Case):
    x = c.input("x", "float32", (3, 16))
    c.op("CUSTOM:SignalOverlapAdd", [x], [c.output("y", "float32", (12,))], T=0, frame_step=4)


@case("div_int32")
def _div_int32(c: Case):
    """Integer division truncates toward zero (the audio front end's feature scaling divides)."""
    a = c.input("a", "int32", (2, 8), -100, 100)
    b = c.input("b", "int32", (8,), -9, 9)
    c.feeds["b"][c.feeds["b"] == 0] = 7
    c.op("DIV", [a, b], [c.output("y", "int32", (2, 8))], ("DivOptions", {}))


@case("cast_uint32_to_int32")
def _cast_uint32(c: Case):
    x = c.input("x", "uint32", (2, 9))
    c.op("CAST", [x], [c.output("y", "int32", (2, 9))])


@case("signal_energy_int16")
def _signal_energy(c: Case):
    x = c.input("x", "int16", (66,))
    c.op("CUSTOM:SignalEnergy", [x], [c.output("y", "uint32", (33,))], end_index=33, start_index=0)


@case("signal_filter_bank_uint32")
def _signal_filter_bank(c: Case):
    x = c.input("x", "uint32", (40,))
    widths = np.int16([2, 3, 4, 5, 6, 7, 8])
    weights = c.rng.integers(0, 4096, int(widths.sum())).astype(np.int16)
    tables = [weights, (4096 - weights).astype(np.int16), np.int16([1, 3, 6, 10, 15, 21, 28]),
              np.concatenate([[0], np.cumsum(widths)[:-1]]).astype(np.int16), widths]
    ins = [x] + [c.const(n, t) for n, t in zip(("weights", "unweights", "starts", "weight_starts", "widths"), tables)]
    c.op("CUSTOM:SignalFilterBank", ins, [c.output("y", "uint64", (6,))], num_channels=6)


@case("signal_filter_bank_square_root_uint64")
def _signal_square_root(c: Case):
    x = c.input("x", "uint64", (40,))
    c.feeds["x"][:20] >>= 32  # below 2^32 (the 32-bit path) as well as above
    c.op("CUSTOM:SignalFilterBankSquareRoot", [x, c.const("shift", np.int32(2))], [c.output("y", "uint32", (40,))])


@case("signal_filter_bank_spectral_subtraction_uint32")
def _signal_spectral_subtraction(c: Case):
    x = c.input("x", "uint32", (40,))
    c.feeds["x"] >>= 14
    c.op("CUSTOM:SignalFilterBankSpectralSubtraction", [x], [c.output("y", "uint32", (40,)),
                                                             c.output("noise", "uint32", (40,))],
         alternate_one_minus_smoothing=15401, alternate_smoothing=983, clamping=False, min_signal_remaining=819,
         num_channels=40, one_minus_smoothing=15974, smoothing=410, smoothing_bits=10, spectral_subtraction_bits=14)


@case("signal_pcan_uint32")
def _signal_pcan(c: Case):
    x = c.input("x", "uint32", (40,))
    noise = c.input("noise", "uint32", (40,))
    c.feeds["x"] >>= 12
    lut = c.const("gain_lut", c.rng.integers(-2000, 32767, 125).astype(np.int16))
    c.op("CUSTOM:SignalPCAN", [x, noise, lut], [c.output("y", "uint32", (40,))], snr_shift=6)


@case("signal_filter_bank_log_uint32")
def _signal_log(c: Case):
    x = c.input("x", "uint32", (40,))
    c.op("CUSTOM:SignalFilterBankLog", [x], [c.output("y", "int16", (40,))], input_correction_bits=3,
         output_scale=1600)


CONVERTED = ROOT / "tests" / "data" / "tflite"  # int8 models made by TensorFlow's converter (models/make_int8.py)


def copy_converted(folder: Path, select: str | None) -> list[str]:
    """The int8 single-operator models TensorFlow's converter made, with seeded inputs over the int8 range."""
    import tflite
    names = []
    for path in sorted(CONVERTED.glob("*.tflite")):
        name = f"converted_{path.stem}_int8"
        if select and select not in name:
            continue
        data = path.read_bytes()
        graph = tflite.Model.GetRootAsModel(data, 0).Subgraphs(0)
        rng = np.random.default_rng(zlib.crc32(name.encode()))
        feeds = {}
        for k in range(graph.InputsLength()):
            t = graph.Tensors(int(graph.Inputs(k)))
            feeds[t.Name().decode()] = rng.integers(-128, 128, t.ShapeAsNumpy()).astype(np.int8)
        (folder / f"{name}.tflite").write_bytes(data)
        np.savez(folder / f"{name}.npz", **feeds)
        names.append(name)
    return names


def _int8_weights(c: Case, shape, channels: int, axis: int, x_scale: float):
    """Per-channel int8 weights and their int32 bias, quantized as TFLite's converter does."""
    scales = c.rng.uniform(0.005, 0.03, channels)
    w = c.const("w", c.rng.integers(-127, 128, shape).astype(np.int8), quant=(scales, np.zeros(channels, np.int64)))
    c.tensors[w] = Tensor("w", "int8", list(shape), c.tensors[w].data, (scales, np.zeros(channels, np.int64)), axis)
    b = c.const("b", c.rng.integers(-800, 800, (channels,)).astype(np.int32),
                quant=(scales * x_scale, np.zeros(channels, np.int64)))
    return w, b


@case("depthwise_conv_2d_multiplier2_int8")
def _dw_int8(c: Case):
    x = c.input("x", "int8", (1, 7, 6, 3), quant=(0.04, 5))
    w, b = _int8_weights(c, (1, 3, 3, 6), 6, 3, 0.04)
    c.op("DEPTHWISE_CONV_2D", [x, w, b], [c.output("y", "int8", (1, 4, 3, 6), quant=(0.15, -9))],
         ("DepthwiseConv2DOptions", {"Padding": 0, "StrideH": 2, "StrideW": 2, "DepthMultiplier": 2,
                                     "FusedActivationFunction": 3}))


@case("fully_connected_int8")
def _fc_int8(c: Case):
    x = c.input("x", "int8", (3, 10), quant=(0.06, -4))
    w, b = _int8_weights(c, (7, 10), 7, 0, 0.06)
    c.op("FULLY_CONNECTED", [x, w, b], [c.output("y", "int8", (3, 7), quant=(0.3, 2))],
         ("FullyConnectedOptions", {}))


def _int8_window(name: str, code: str, options, y_shape, y_quant=(0.05, 3), dtype="int8", x_quant=(0.05, 3)):
    def build(c: Case):
        x = c.input("x", dtype, (1, 7, 6, 4), quant=x_quant)
        c.op(code, [x], [c.output("y", dtype, y_shape, quant=y_quant)], options)
    CASES[name] = build


_int8_window("average_pool_2d_same_int8", "AVERAGE_POOL_2D", ("Pool2DOptions", {
    "Padding": 0, "FilterHeight": 3, "FilterWidth": 2, "StrideH": 2, "StrideW": 2}), (1, 4, 3, 4))
_int8_window("max_pool_2d_valid_relu6_int8", "MAX_POOL_2D", ("Pool2DOptions", {
    "Padding": 1, "FilterHeight": 2, "FilterWidth": 2, "StrideH": 2, "StrideW": 2, "FusedActivationFunction": 3}),
    (1, 3, 3, 4))
_int8_window("softmax_int8", "SOFTMAX", ("SoftmaxOptions", {"Beta": 1.0}), (1, 7, 6, 4), (1 / 256, -128))
_int8_window("logistic_int8", "LOGISTIC", None, (1, 7, 6, 4), (1 / 256, -128))
_int8_window("tanh_int8", "TANH", None, (1, 7, 6, 4), (1 / 128, 0))
_int8_window("relu_int8", "RELU", None, (1, 7, 6, 4), (0.03, -128))


unary("leaky_relu_requantized_int8", "LEAKY_RELU", dtype="int8", shape=(4, 64), quant=(0.04, -10),
      y_quant=(0.027, 7), options=("LeakyReluOptions", {"Alpha": 0.15}))
unary("leaky_relu_negative_alpha_int8", "LEAKY_RELU", dtype="int8", shape=(4, 64), quant=(0.05, 3),
      options=("LeakyReluOptions", {"Alpha": -0.5}))
unary("hard_swish_int8", "HARD_SWISH", dtype="int8", shape=(4, 64), quant=(0.05, -6), y_quant=(0.03, -100))
unary("hard_swish_fine_int8", "HARD_SWISH", dtype="int8", shape=(4, 64), quant=(0.004, 20), y_quant=(0.0021, -3))
unary("abs_requantized_int8", "ABS", dtype="int8", shape=(4, 64), quant=(0.05, -6), y_quant=(0.03, -100))
unary("abs_requantized_int16", "ABS", dtype="int16", shape=(4, 64), quant=(0.002, 0), y_quant=(0.0015, 0))
unary("abs_int16", "ABS", dtype="int16", shape=(4, 64), quant=(0.002, 0))
binary("floor_div_int32", "FLOOR_DIV", dtype="int32", lo=-9, hi=9, b_lo=1, b_hi=4)
unary("elu_int8", "ELU", dtype="int8", shape=(4, 64), quant=(0.04, 10), y_quant=(0.03, -90))


@case("mean_int8")
def _mean_int8(c: Case):
    x = c.input("x", "int8", (1, 5, 6, 4), quant=(0.05, 3))
    c.op("MEAN", [x, c.const("axes", np.int32([1, 2]))], [c.output("y", "int8", (1, 4), quant=(0.02, -1))],
         ("ReducerOptions", {"KeepDims": False}))


@case("mul_relu_int8")
def _mul_int8(c: Case):
    a, b = c.input("a", "int8", (2, 3, 4), quant=(0.05, 3)), c.input("b", "int8", (1, 4), quant=(0.08, -7))
    c.op("MUL", [a, b], [c.output("y", "int8", (2, 3, 4), quant=(0.1, -20))],
         ("MulOptions", {"FusedActivationFunction": 1}))


@case("pad_int8")
def _pad_int8(c: Case):
    x = c.input("x", "int8", (1, 3, 4, 2), quant=(0.05, 9))
    c.op("PAD", [x, c.const("pads", np.int32([[0, 0], [1, 2], [0, 1], [0, 0]]))],
         [c.output("y", "int8", (1, 6, 5, 2), quant=(0.05, 9))])


@case("quantize_uint8_to_int8")
def _uint8_in(c: Case):
    x = c.input("x", "uint8", (2, 9), quant=(0.05, 128))
    c.op("QUANTIZE", [x], [c.output("y", "int8", (2, 9), quant=(0.05, 0))])


@case("quantize_int8_to_uint8")
def _uint8_out(c: Case):
    x = c.input("x", "int8", (2, 9), quant=(0.05, -3))
    c.op("QUANTIZE", [x], [c.output("y", "uint8", (2, 9), quant=(0.07, 120))])


@case("dequantize_uint8")
def _uint8_dequantize(c: Case):
    x = c.input("x", "uint8", (2, 9), quant=(0.05, 128))
    c.op("DEQUANTIZE", [x], [c.output("y", "float32", (2, 9))])


@case("quantize_requantize_int8")
def _requant(c: Case):
    x = c.input("x", "int8", (2, 9), quant=(0.05, 3))
    c.op("QUANTIZE", [x], [c.output("y", "int8", (2, 9), quant=(0.11, -17))])


def _recurrent(make, seed: int, dtype: str = "float32", **form):
    """A recurrent operator's model from tests/tflite_recurrent_models.py (one invocation from its
    starting state; tests/test_tflite_recurrent.py checks several in a row)."""
    def build(c: Case):
        data, shape = make(seed, **form)
        c.raw = data
        if dtype in ("int8", "int16"):
            info = np.iinfo(dtype)
            c.feeds["x"] = c.rng.integers(info.min, info.max + 1, shape).astype(dtype)
        else:
            c.feeds["x"] = c.rng.uniform(-2.0, 2.0, shape).astype(np.float32)
    return build


CASES["unidirectional_sequence_lstm_float32"] = _recurrent(lstm_float, 0)
CASES["unidirectional_sequence_lstm_time_major_clip_float32"] = _recurrent(lstm_float, 1, time_major=True,
                                                                           cell_clip=0.4)
CASES["svdf_float32"] = _recurrent(svdf_float, 0)
CASES["svdf_rank1_float32"] = _recurrent(svdf_float, 1, rank=1, activation=0)
def _control(data: bytes, condition: bool | None):
    """A model with IF or WHILE subgraphs (tests/tflite_recurrent_models.py) and its seeded inputs."""
    def build(c: Case):
        c.raw = data
        if condition is not None:
            c.feeds["take"] = np.array(condition)
        c.feeds["x"] = c.rng.uniform(-2.0, 2.0, (2, 3)).astype(np.float32)
    return build


CASES["if_then_float32"] = _control(branch(), True)
CASES["if_else_float32"] = _control(branch(), False)
CASES["while_counted_float32"] = _control(counted_loop(3), None)
CASES["call_once_variables_float32"] = _recurrent(lambda seed: (accumulator(1.0, (2, 3), 0.5), [2, 3]), 0)
CASES["svdf_int8"] = _recurrent(svdf_int8, 0, "int8")
CASES["svdf_rank4_int8"] = _recurrent(svdf_int8, 1, "int8", batch=1, n_input=24, filters=16, memory=8, rank=4)
CASES["unidirectional_sequence_lstm_int8"] = _recurrent(lstm_int8, 0, "int8")
CASES["unidirectional_sequence_lstm_time_major_clip_int8"] = _recurrent(lstm_int8, 1, "int8", time_major=True,
                                                                        cell_clip=0.5)
CASES["unidirectional_sequence_lstm_int16"] = _recurrent(lstm_16x8, 0, "int16")
CASES["unidirectional_sequence_lstm_time_major_clip_int16"] = _recurrent(lstm_16x8, 1, "int16", time_major=True,
                                                                         cell_clip=0.5)


# --- 16x8 (int16 activations, int8 weights, int64 or int32 bias; zero points 0) ---------------------
def _weights_16x8(c: Case, shape, channels: int, axis: int, x_scale: float, bias: str | None = "int64",
                  bias_bits: int = 20):
    """Per-channel int8 weights and a bias of type `bias` (int64, int32, or None for no bias)."""
    scales = c.rng.uniform(0.002, 0.03, channels)
    zeros = np.zeros(channels, np.int64)
    w = c.add("w", "int8", shape, c.rng.integers(-127, 128, shape).astype(np.int8), (scales, zeros))
    c.tensors[w] = Tensor("w", "int8", list(shape), c.tensors[w].data, (scales, zeros), axis)
    if bias is None:
        return [w, -1]
    data = c.rng.integers(-(1 << bias_bits), 1 << bias_bits, (channels,)).astype(bias)
    return [w, c.const("b", data, quant=(scales * x_scale, zeros))]


def _conv_16x8(name, code, w_shape, y_shape, options, bias="int64", y_scale=0.02, bias_bits=20, x_shape=(1, 7, 6, 4)):
    def build(c: Case):
        x = c.input("x", "int16", x_shape, quant=(0.002, 0))
        axis = 3 if code == "DEPTHWISE_CONV_2D" else 0
        ins = [x, *_weights_16x8(c, w_shape, w_shape[axis], axis, 0.002, bias, bias_bits)]
        c.op(code, ins, [c.output("y", "int16", y_shape, quant=(y_scale, 0))], options)
    CASES[name] = build


_conv_16x8("conv_2d_same_relu_int16", "CONV_2D", (5, 3, 3, 4), (1, 7, 6, 5), conv_options(0, act=1), y_scale=0.01)
_conv_16x8("conv_2d_valid_stride2_int32_bias_int16", "CONV_2D", (3, 3, 2, 4), (1, 3, 3, 3), conv_options(1, stride=2),
           bias="int32")
_conv_16x8("conv_2d_pointwise_no_bias_int16", "CONV_2D", (6, 1, 1, 4), (1, 7, 6, 6), conv_options(1), bias=None,
           y_scale=0.004)
_conv_16x8("conv_2d_dilated_wide_sums_int16", "CONV_2D", (2, 2, 2, 4), (1, 7, 6, 2), conv_options(0, dilation=2),
           y_scale=1000.0, bias_bits=40)
_conv_16x8("conv_2d_relu6_int16", "CONV_2D", (4, 3, 3, 4), (1, 7, 6, 4), conv_options(0, act=3), y_scale=0.003)
_conv_16x8("depthwise_conv_2d_same_relu6_int16", "DEPTHWISE_CONV_2D", (1, 3, 3, 4), (1, 7, 6, 4),
           conv_options(0, act=3, depth_multiplier=1), y_scale=0.003)
_conv_16x8("depthwise_conv_2d_valid_multiplier2_int16", "DEPTHWISE_CONV_2D", (1, 3, 3, 8), (1, 3, 2, 8),
           conv_options(1, stride=2, depth_multiplier=2), y_scale=0.002)
_conv_16x8("depthwise_conv_2d_dilated_int16", "DEPTHWISE_CONV_2D", (1, 2, 2, 4), (1, 7, 6, 4),
           conv_options(0, dilation=2, depth_multiplier=1))


def _transpose_conv_quantized(name, dtype, x_shape, w_shape, y_shape, padding, stride, bias="int32", act=0):
    """TRANSPOSE_CONV on int8 (int32 bias) or 16x8 data (int64 or int16 bias, or none)."""
    def build(c: Case):
        x_quant, y_quant = ((0.05, -3), (0.08, 6)) if dtype == "int8" else ((0.002, 0), (0.004, 0))
        x = c.input("x", dtype, x_shape, quant=x_quant)
        shape = c.const("output_shape", np.array(y_shape, np.int32))
        w, b = _weights_16x8(c, w_shape, w_shape[0], 0, x_quant[0], bias, 14 if bias == "int16" else 20)
        c.op("TRANSPOSE_CONV", [shape, w, x, b], [c.output("y", dtype, y_shape, quant=y_quant)],
             ("TransposeConvOptions", {"Padding": padding, "StrideH": stride, "StrideW": stride,
                                       "FusedActivationFunction": act}))
    CASES[name] = build


_transpose_conv_quantized("transpose_conv_same_stride2_int8", "int8", (1, 4, 5, 3), (2, 3, 3, 3), (1, 8, 10, 2), 0, 2)
_transpose_conv_quantized("transpose_conv_valid_stride2_relu_int8", "int8", (1, 3, 4, 2), (3, 3, 3, 2), (1, 7, 9, 3),
                          1, 2, act=1)
_transpose_conv_quantized("transpose_conv_same_stride1_no_bias_int8", "int8", (1, 5, 4, 3), (4, 2, 2, 3),
                          (1, 5, 4, 4), 0, 1, bias=None)
_transpose_conv_quantized("transpose_conv_same_stride2_int16", "int16", (1, 4, 5, 3), (2, 3, 3, 3), (1, 8, 10, 2),
                          0, 2, bias="int64")
_transpose_conv_quantized("transpose_conv_valid_stride3_int16_bias_int16", "int16", (1, 3, 3, 2), (3, 2, 2, 2),
                          (1, 8, 8, 3), 1, 3, bias="int16")


def _batch_matmul_int8(name, a_shape, b_shape, y_shape, adj_x=False, adj_y=False, quants=((0.05, -3), (0.04, 7))):
    def build(c: Case):
        a = c.input("a", "int8", a_shape, quant=quants[0])
        b = c.input("b", "int8", b_shape, quant=quants[1])
        c.op("BATCH_MATMUL", [a, b], [c.output("y", "int8", y_shape, quant=(0.12, -5))],
             ("BatchMatMulOptions", {"AdjX": adj_x, "AdjY": adj_y}))
    CASES[name] = build


_batch_matmul_int8("batch_matmul_int8", (2, 3, 4), (2, 4, 5), (2, 3, 5))
_batch_matmul_int8("batch_matmul_adj_y_broadcast_int8", (2, 3, 6), (1, 5, 6), (2, 3, 5), adj_y=True)
_batch_matmul_int8("batch_matmul_adj_x_symmetric_int8", (3, 4, 2), (3, 4, 3), (3, 2, 3), adj_x=True,
                   quants=((0.03, 0), (0.02, 0)))


def _prelu_int8(name, alpha_shape, alpha_quant):
    def build(c: Case):
        x = c.input("x", "int8", (1, 4, 5, 3), quant=(0.05, 10))
        alpha = c.const("alpha", c.rng.integers(-128, 128, alpha_shape).astype(np.int8), quant=alpha_quant)
        c.op("PRELU", [x, alpha], [c.output("y", "int8", (1, 4, 5, 3), quant=(0.04, -6))])
    CASES[name] = build


_prelu_int8("prelu_per_channel_int8", (1, 1, 3), (0.004, -20))
_prelu_int8("prelu_elementwise_int8", (4, 5, 3), (0.01, 3))


def _fc_16x8(name, bias="int64", bias_bits=20, y_scale=0.05, act=0):
    def build(c: Case):
        x = c.input("x", "int16", (3, 24), quant=(0.002, 0))
        scale = float(c.rng.uniform(0.002, 0.03))
        w = c.const("w", c.rng.integers(-127, 128, (5, 24)).astype(np.int8), quant=(scale, 0))
        ins = [x, w]
        if bias is not None:
            ins.append(c.const("b", c.rng.integers(-(1 << bias_bits), 1 << bias_bits, (5,)).astype(bias),
                               quant=(scale * 0.002, 0)))
        c.op("FULLY_CONNECTED", ins, [c.output("y", "int16", (3, 5), quant=(y_scale, 0))],
             ("FullyConnectedOptions", {"FusedActivationFunction": act}))
    CASES[name] = build


_fc_16x8("fully_connected_int16")
_fc_16x8("fully_connected_int32_bias_relu_int16", bias="int32", act=1)
_fc_16x8("fully_connected_no_bias_int16", bias=None)
_fc_16x8("fully_connected_wide_sums_int16", bias_bits=38, y_scale=500.0)

Q16 = (0.0004, 0)  # an int16 quantization (zero point 0, as TFLite requires for int16 data)


def _binary_16x8(name, code, b_shape, options, y_quant=(0.0007, 0), a_quant=(0.0004, 0), b_quant=(0.0003, 0),
                 dtype="int16"):
    def build(c: Case):
        a, b = c.input("a", dtype, (2, 3, 4), quant=a_quant), c.input("b", dtype, b_shape, quant=b_quant)
        c.op(code, [a, b], [c.output("y", dtype, (2, 3, 4), quant=y_quant)], options)
    CASES[name] = build


_binary_16x8("add_int16", "ADD", (2, 3, 4), ("AddOptions", {}))
_binary_16x8("add_broadcast_relu_int16", "ADD", (1, 4), ("AddOptions", {"FusedActivationFunction": 1}))
_binary_16x8("sub_int16", "SUB", (2, 3, 4), ("SubOptions", {}))
_binary_16x8("sub_broadcast_int16", "SUB", (3, 1), ("SubOptions", {}), a_quant=(0.0002, 0))
_binary_16x8("mul_int16", "MUL", (2, 3, 4), ("MulOptions", {}), y_quant=(0.3, 0))
_binary_16x8("mul_broadcast_relu6_int16", "MUL", (1, 4), ("MulOptions", {"FusedActivationFunction": 3}),
             y_quant=(0.0003, 0))
_binary_16x8("sub_int8", "SUB", (2, 3, 4), ("SubOptions", {}), y_quant=(0.1, 1), a_quant=(0.05, 3),
             b_quant=(0.08, -7), dtype="int8")


def _window_16x8(name: str, code: str, options, y_shape, y_quant=Q16):
    _int8_window(name, code, options, y_shape, y_quant, "int16", Q16)


_window_16x8("average_pool_2d_same_int16", "AVERAGE_POOL_2D", ("Pool2DOptions", {
    "Padding": 0, "FilterHeight": 3, "FilterWidth": 2, "StrideH": 2, "StrideW": 2}), (1, 4, 3, 4))
_window_16x8("max_pool_2d_valid_relu_int16", "MAX_POOL_2D", ("Pool2DOptions", {
    "Padding": 1, "FilterHeight": 2, "FilterWidth": 2, "StrideH": 2, "StrideW": 2, "FusedActivationFunction": 1}),
    (1, 3, 3, 4))
_window_16x8("relu_int16", "RELU", None, (1, 7, 6, 4), (0.0003, 0))
_window_16x8("relu6_int16", "RELU6", None, (1, 7, 6, 4))
_window_16x8("leaky_relu_int16", "LEAKY_RELU", ("LeakyReluOptions", {"Alpha": 0.2}), (1, 7, 6, 4), (0.0003, 0))
_window_16x8("leaky_relu_negative_alpha_int16", "LEAKY_RELU", ("LeakyReluOptions", {"Alpha": -0.5}), (1, 7, 6, 4))

# int16 LOGISTIC, TANH and SOFTMAX: TFLite Micro's interpolated tables, at power-of-two input scales
# (taken as they are) and general ones (rescaled by its multiplier and shift)
Q15 = (1 / 32768, 0)  # their output quantization
for _code in ("LOGISTIC", "TANH"):
    unary(f"{_code.lower()}_int16", _code, dtype="int16", shape=(4, 64), quant=(0.0004, 0), y_quant=Q15)
unary("logistic_power_of_two_scale_int16", "LOGISTIC", dtype="int16", shape=(4, 64), quant=(2 ** -12, 0),
      y_quant=Q15)
unary("tanh_power_of_two_scale_int16", "TANH", dtype="int16", shape=(4, 64), quant=(2 ** -11, 0), y_quant=Q15)
unary("softmax_int16", "SOFTMAX", dtype="int16", shape=(4, 64), quant=(0.001, 0), y_quant=Q15,
      options=("SoftmaxOptions", {"Beta": 1.0}))
unary("softmax_beta_int16", "SOFTMAX", dtype="int16", shape=(2, 3, 10), quant=(0.0002, 0), y_quant=Q15,
      options=("SoftmaxOptions", {"Beta": 0.5}))


# element movers on int16 data, where TFLite Micro takes int16
shaped("transpose_int16", "TRANSPOSE", (2, 3, 4, 5), (2, 5, 3, 4), [[0, 3, 1, 2]], dtype="int16", quant=Q16)
shaped("reshape_int16", "RESHAPE", (2, 3, 4), (6, 4), [[6, 4]], dtype="int16", quant=Q16)
shaped("strided_slice_int16", "STRIDED_SLICE", (4, 6, 5), (2, 6, 3), [[1, 0, -1], [4, 0, 0], [2, 1, -2]],
       ("StridedSliceOptions", {"BeginMask": 2, "EndMask": 6}), dtype="int16", quant=Q16)
shaped("pad_int16", "PAD", (1, 3, 4, 2), (1, 6, 5, 2), [[[0, 0], [1, 2], [0, 1], [0, 0]]], dtype="int16", quant=Q16)


@case("concatenation_int16")
def _concat_16x8(c: Case):
    a, b = c.input("a", "int16", (1, 3, 4), quant=Q16), c.input("b", "int16", (1, 2, 4), quant=Q16)
    c.op("CONCATENATION", [a, b], [c.output("y", "int16", (1, 5, 4), quant=Q16)], ("ConcatenationOptions", {"Axis": 1}))


@case("quantize_dequantize_int16")
def _qdq_16x8(c: Case):
    x = c.input("x", "float32", (2, 8), lo=-8, hi=8)
    q = c.add("q", "int16", (2, 8), quant=(0.0003, 0))
    c.op("QUANTIZE", [x], [q])
    c.op("DEQUANTIZE", [q], [c.output("y", "float32", (2, 8))])


def _requantize_case(name, x_dtype, x_quant, y_dtype, y_quant):
    def build(c: Case):
        x = c.input("x", x_dtype, (2, 9), quant=x_quant)
        c.op("QUANTIZE", [x], [c.output("y", y_dtype, (2, 9), quant=y_quant)])
    CASES[name] = build


_requantize_case("quantize_int16_to_int8", "int16", (0.0004, 0), "int8", (0.06, -5))
_requantize_case("quantize_int8_to_int16", "int8", (0.05, -3), "int16", (0.0004, 0))
_requantize_case("quantize_requantize_int16", "int16", (0.0004, 0), "int16", (0.0007, 0))


def _requantize_int32(name, y_dtype, x_quant, y_quant):
    """int32 data (a bias-scaled accumulator) requantized, over a range that reaches both saturations."""
    def build(c: Case):
        x = c.input("x", "int32", (4, 16), quant=x_quant)
        c.feeds["x"] = c.rng.integers(-300000, 300000, (4, 16)).astype(np.int32)
        c.op("QUANTIZE", [x], [c.output("y", y_dtype, (4, 16), quant=y_quant)])
    CASES[name] = build


_requantize_int32("quantize_int32_to_int8", "int8", (0.0004, 7), (0.5, -3))
_requantize_int32("quantize_int32_to_int16", "int16", (0.0001, 0), (0.0007, 0))


@case("mean_int16")
def _mean_16x8(c: Case):
    x = c.input("x", "int16", (1, 5, 6, 4), quant=Q16)
    c.op("MEAN", [x, c.const("axes", np.int32([1, 2]))], [c.output("y", "int16", (1, 4), quant=(0.0002, 0))],
         ("ReducerOptions", {"KeepDims": False}))



# --- SUM, ADD_N, GELU, BATCH_MATMUL on integer data; MIRROR_PAD in SYMMETRIC mode ------------------
def _sum_quantized(name, dtype, x_shape, axes, keep, y_shape, x_quant, y_quant, code="SUM"):
    def build(c: Case):
        x = c.input("x", dtype, x_shape, quant=x_quant)
        c.op(code, [x, c.const("axes", np.int32(axes))], [c.output("y", dtype, y_shape, quant=y_quant)],
             ("ReducerOptions", {"KeepDims": keep}))
    CASES[name] = build


_sum_quantized("sum_int8", "int8", (2, 3, 4, 5), [1, 2], False, (2, 5), (0.05, 3), (0.3, -7))
_sum_quantized("sum_keep_dims_last_axis_int8", "int8", (2, 3, 6), [-1], True, (2, 3, 1), Q, Q)
_sum_quantized("sum_int16", "int16", (2, 3, 8), [1], False, (2, 8), (0.0004, 0), (0.002, 0))
_sum_quantized("sum_keep_dims_two_axes_int16", "int16", (3, 4, 5), [0, 2], True, (1, 4, 1), Q16, (0.003, 0))
# MEAN over axes other than H and W: TFLite Micro's QuantizedMeanOrSum, not its Mean kernel
_sum_quantized("mean_last_axis_int8", "int8", (2, 3, 7), [-1], False, (2, 3), (0.05, 3), (0.03, -5), "MEAN")
_sum_quantized("mean_keep_dims_two_axes_int8", "int8", (3, 20, 6), [0, 2], True, (1, 20, 1), (0.1, -128), (0.02, 10),
               "MEAN")
_sum_quantized("mean_axis_1_int16", "int16", (3, 50, 6), [1], False, (3, 6), Q16, (0.0007, 0), "MEAN")


def _add_n_int8(name, count, y_quant):
    def build(c: Case):
        xs = [c.input(f"x{i}", "int8", (2, 5), quant=(0.05, 3)) for i in range(count)]
        c.op("ADD_N", xs, [c.output("y", "int8", (2, 5), quant=y_quant)])
    CASES[name] = build


_add_n_int8("add_n_int8", 3, (0.09, -4))
_add_n_int8("add_n_two_inputs_same_quantization_int8", 2, (0.05, 3))
for _approximate, _tag in ((False, ""), (True, "_tanh")):
    unary(f"gelu{_tag}_int8", "GELU", options=("GeluOptions", {"Approximate": _approximate}), dtype="int8",
          shape=(4, 64), quant=(0.05, 3), y_quant=(0.03, -60))
    unary(f"gelu{_tag}_int16", "GELU", options=("GeluOptions", {"Approximate": _approximate}), dtype="int16",
          shape=(4, 64), quant=(0.0004, 0), y_quant=(0.0003, 0))


def _batch_matmul_int16(name, b_dtype, a_shape, b_shape, y_shape, adj_y=False):
    def build(c: Case):
        a = c.input("a", "int16", a_shape, quant=(0.0005, 0))
        b = c.input("b", b_dtype, b_shape, quant=(0.0004, 0) if b_dtype == "int16" else (0.05, 0))
        c.op("BATCH_MATMUL", [a, b], [c.output("y", "int16", y_shape, quant=(0.02, 0))],
             ("BatchMatMulOptions", {"AdjY": adj_y}))
    CASES[name] = build


_batch_matmul_int16("batch_matmul_int16", "int16", (2, 3, 6), (2, 6, 5), (2, 3, 5))
_batch_matmul_int16("batch_matmul_adj_y_broadcast_int16", "int16", (2, 3, 6), (1, 5, 6), (2, 3, 5), adj_y=True)
_batch_matmul_int16("batch_matmul_16x8_int16", "int8", (2, 3, 6), (2, 6, 5), (2, 3, 5))
for _dtype, _quant in (("float32", None), ("int8", Q), ("int32", None)):
    shaped(f"mirror_pad_symmetric_{_dtype}", "MIRROR_PAD", (2, 3, 4), (2, 8, 5), [[[0, 0], [2, 3], [1, 0]]],
           ("MirrorPadOptions", {"Mode": 1}), dtype=_dtype, quant=_quant)


def _div_int8(name, b_shape, quants, act=0):
    def build(c: Case):
        (a_quant, b_quant, y_quant) = quants
        a = c.input("a", "int8", (2, 3, 4), quant=a_quant)
        b = c.input("b", "int8", b_shape, quant=b_quant)
        c.feeds["b"][c.feeds["b"] == b_quant[1]] += 1  # (no division by zero, which TFLite leaves undefined)
        c.op("DIV", [a, b], [c.output("y", "int8", (2, 3, 4), quant=y_quant)],
             ("DivOptions", {"FusedActivationFunction": act}))
    CASES[name] = build


_div_int8("div_int8", (2, 3, 4), ((0.05, 3), (0.02, -10), (0.1, 2)))
_div_int8("div_broadcast_relu6_int8", (3, 1), ((0.1, -128), (0.003, 0), (0.05, -5)), act=3)


def _prelu_int16(name, alpha_shape, x_zero_point):
    def build(c: Case):
        x = c.input("x", "int16", (1, 4, 5, 3), quant=(0.0005, x_zero_point))
        alpha = c.const("alpha", c.rng.integers(-128, 128, alpha_shape).astype(np.int8), quant=(0.004, -20))
        c.op("PRELU", [x, alpha], [c.output("y", "int16", (1, 4, 5, 3), quant=(0.0007, -x_zero_point))])
    CASES[name] = build


_prelu_int16("prelu_per_channel_int16", (1, 1, 3), 0)
_prelu_int16("prelu_elementwise_zero_points_int16", (4, 5, 3), 300)
shaped("cumsum_int8", "CUMSUM", (3, 40), (3, 40), [[1]], ("CumsumOptions", {}), dtype="int8", quant=(0.05, 3))
shaped("cumsum_exclusive_reverse_int8", "CUMSUM", (6, 5), (6, 5), [[0]],
       ("CumsumOptions", {"Exclusive": True, "Reverse": True}), dtype="int8", quant=(0.02, -128))


@case("fill_float32")
def _fill_float32(c: Case):
    """The value a graph input (computed at run time), broadcast to the constant dimensions."""
    c.op("FILL", [c.const("dims", np.int32([2, 3])), c.input("value", "float32", ())],
         [c.output("y", "float32", (2, 3))])


@case("fill_int8")
def _fill_int8(c: Case):
    """A constant value, folded at build time, beside the value a graph input."""
    c.op("FILL", [c.const("dims", np.int32([4])), c.const("value", np.int8(-7), quant=Q)],
         [c.output("folded", "int8", (4,), quant=Q)])
    c.op("FILL", [c.const("dims", np.int32([3, 2])), c.input("value", "int8", (), quant=Q)],
         [c.output("y", "int8", (3, 2), quant=Q)])


def _embedding_int8(name, out_dtype):
    def build(c: Case):
        ids = c.input("ids", "int32", (3,), lo=0, hi=4)
        table = c.const("table", c.rng.integers(-128, 128, (5, 4)).astype(np.int8), quant=(0.0213, 0))
        c.op("EMBEDDING_LOOKUP", [ids, table],
             [c.output("y", out_dtype, (3, 4), quant=(0.0213, 0) if out_dtype == "int8" else None)])
    CASES[name] = build


_embedding_int8("embedding_lookup_hybrid_int8", "float32")
_embedding_int8("embedding_lookup_int8", "int8")


def write_all(folder: Path = MODELS, select: str | None = None) -> list[str]:
    """Write every case (or those whose name contains `select`); returns their names."""
    folder.mkdir(parents=True, exist_ok=True)
    names = copy_converted(folder, select)
    for name, build in sorted(CASES.items()):
        if select and select not in name:
            continue
        c = Case(name)
        build(c)
        c.write(folder)
        names.append(name)
    return names


if __name__ == "__main__":
    print(f"wrote {len(write_all(select=sys.argv[1] if len(sys.argv) > 1 else None))} models to {MODELS}")
