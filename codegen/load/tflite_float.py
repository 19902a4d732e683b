"""TFLite float32 operators -> the ONNX-semantics primitives the ONNX importer uses, with TFLite's
semantics: NHWC tensors (channels-last convolutions and pools, HWIO weights reordered at import),
SAME/VALID padding as explicit pads, fused activations as a Clip of the output, NumPy
broadcasting. Each function converts one operator (see tflite_operators.py)."""
from __future__ import annotations

import numpy as np

from tinsmith.load.tflite_reader import Reader, Unsupported, options

NHWC_TO_NCHW, NCHW_TO_NHWC = [0, 3, 1, 2], [0, 2, 3, 1]


def _bias(r: Reader, inputs) -> list[str]:
    return [r.value(inputs[2])] if len(inputs) > 2 and inputs[2] >= 0 else []


def _weights(r: Reader, w: int, data: np.ndarray) -> str:
    """Weights reordered for the primitive, as a constant named after the model's tensor."""
    return r.add_constant(f"{r.names[w]}_{'x'.join(map(str, data.shape))}", data)


def _via_nchw(r: Reader, x: str, y: int, op: str, inputs, attrs, code: int = 0) -> None:
    """An NCHW primitive applied to NHWC tensor x: transposes around it (the layout pass and the
    optimizer drop the ones that cancel)."""
    first = r.fresh(f"{r.names[y]}_nchw_in")
    r.emit("Transpose", [x], [first], {"perm": NHWC_TO_NCHW})
    out = r.fresh(f"{r.names[y]}_nchw")
    r.emit(op, [first, *inputs], [out], attrs)
    r.emit_activated("Transpose", [out], y, {"perm": NCHW_TO_NHWC}, code)


def conv(r: Reader, op, inputs, outputs) -> None:
    x, w, y = int(inputs[0]), int(inputs[1]), int(outputs[0])
    opts = options(op, "Conv2DOptions")
    m, kh, kw, c = r.shape(w)
    if c != r.shape(x)[3]:
        raise Unsupported(f"grouped CONV_2D ({r.shape(x)[3]} input channels, filters of {c})")
    dil = (opts.DilationHFactor() or 1, opts.DilationWFactor() or 1)
    hwio = np.transpose(r.constant_data(w, "CONV_2D filter"), (1, 2, 3, 0))
    attrs = {"strides": [opts.StrideH(), opts.StrideW()], "dilations": list(dil), "kernel_shape": [kh, kw],
             "pads": r.pads(x, kh, kw, opts, dil)}
    r.emit_activated("ConvNHWC", [r.value(x), _weights(r, w, hwio), *_bias(r, inputs)], y, attrs,
                     opts.FusedActivationFunction())


def depthwise(r: Reader, op, inputs, outputs) -> None:
    x, w, y = int(inputs[0]), int(inputs[1]), int(outputs[0])
    opts = options(op, "DepthwiseConv2DOptions")
    _, kh, kw, m = r.shape(w)
    c = r.shape(x)[3]
    dil = (opts.DilationHFactor() or 1, opts.DilationWFactor() or 1)
    filt = r.constant_data(w, "DEPTHWISE_CONV_2D filter")[0]  # [kh, kw, C * multiplier]
    attrs = {"strides": [opts.StrideH(), opts.StrideW()], "dilations": list(dil), "kernel_shape": [kh, kw],
             "pads": r.pads(x, kh, kw, opts, dil), "group": c}
    code = opts.FusedActivationFunction()
    if m == c:  # the channels-last depthwise form: weights [kh, kw, 1, C]
        r.emit_activated("ConvNHWC", [r.value(x), _weights(r, w, filt[:, :, None, :]), *_bias(r, inputs)], y,
                         attrs, code)
    else:  # a depth multiplier: ONNX's grouped Conv, weights [C * multiplier, 1, kh, kw]
        oihw = np.transpose(filt, (2, 0, 1))[:, None]
        _via_nchw(r, r.value(x), y, "Conv", [_weights(r, w, oihw), *_bias(r, inputs)], attrs, code)


def fully_connected(r: Reader, op, inputs, outputs) -> None:
    x, w, y = int(inputs[0]), int(inputs[1]), int(outputs[0])
    opts = options(op, "FullyConnectedOptions")
    units, depth = r.shape(w)
    rows = int(np.prod(r.shape(x))) // depth
    name = r.names[y]
    flat = r.value(x)
    if r.shape(x) != (rows, depth):
        flat = r.fresh(f"{name}_in_rows")
        r.emit("Reshape", [r.value(x), r.int64(f"{name}_in_shape", (rows, depth))], [flat], {})
    gemm = [flat, r.value(w), *_bias(r, inputs)]
    if r.shape(y) == (rows, units):
        r.emit_activated("Gemm", gemm, y, {"transB": 1}, opts.FusedActivationFunction())
        return
    out = r.fresh(f"{name}_rows")  # keep_num_dims: the rows take the input's leading dimensions back
    r.emit("Gemm", gemm, [out], {"transB": 1})
    r.emit_activated("Reshape", [out, r.int64(f"{name}_shape", r.shape(y))], y, {}, opts.FusedActivationFunction())


def binary(onnx_op: str, options_class: str | None):
    def read(r: Reader, op, inputs, outputs) -> None:
        code = options(op, options_class).FusedActivationFunction() if options_class else 0
        r.emit_activated(onnx_op, [r.value(inputs[0]), r.value(inputs[1])], int(outputs[0]), {}, code)
    return read


def pool(kind: str):
    def read(r: Reader, op, inputs, outputs) -> None:
        attrs, code = r.pool_window(int(inputs[0]), op)
        r.emit_activated(kind, [r.value(inputs[0])], int(outputs[0]), attrs, code)
    return read


def softmax(r: Reader, op, inputs, outputs) -> None:
    x, y = int(inputs[0]), int(outputs[0])
    beta = float(options(op, "SoftmaxOptions").Beta())
    logits = r.value(x)
    if beta != 1.0:
        logits = r.fresh(f"{r.names[y]}_scaled")
        r.emit("Mul", [r.value(x), r.add_constant(f"{r.names[y]}_beta", np.float32(beta))], [logits], {})
    r.emit("Softmax", [logits], [r.names[y]], {"axis": -1})


def concat(r: Reader, op, inputs, outputs) -> None:
    opts = options(op, "ConcatenationOptions")
    r.emit_activated("Concat", [r.value(i) for i in inputs], int(outputs[0]), {"axis": int(opts.Axis())},
                     opts.FusedActivationFunction())


def pad(r: Reader, op, inputs, outputs) -> None:
    """PAD and PADV2 (its third input is the padding value)."""
    widths = np.asarray(r.constant_data(inputs[1], "PAD's paddings"), np.int64).reshape(-1, 2)
    value = [r.value(inputs[2])] if len(inputs) > 2 and inputs[2] >= 0 else []
    r.emit("Pad", [r.value(inputs[0]), r.int64(f"{r.names[int(outputs[0])]}_pads", widths.T.reshape(-1)), *value],
           [r.names[int(outputs[0])]], {"mode": "constant"})


def unary(onnx_op: str, **attrs):
    def read(r: Reader, op, inputs, outputs) -> None:
        r.emit(onnx_op, [r.value(inputs[0])], [r.names[int(outputs[0])]], attrs)
    return read


def clamp(lo: float, hi: float | None):
    def read(r: Reader, op, inputs, outputs) -> None:
        r.emit("Clip", [r.value(inputs[0])], [r.names[int(outputs[0])]], {"min": lo, **({"max": hi} if hi else {})})
    return read


def chain(*ops: str):
    """Unary operators one after the other (RSQRT is Sqrt then Reciprocal)."""
    def read(r: Reader, op, inputs, outputs) -> None:
        value, y = r.value(inputs[0]), int(outputs[0])
        for k, onnx_op in enumerate(ops):
            out = r.names[y] if k == len(ops) - 1 else r.fresh(f"{r.names[y]}_{onnx_op.lower()}")
            r.emit(onnx_op, [value], [out], {})
            value = out
    return read


def square(r: Reader, op, inputs, outputs) -> None:
    r.emit("Mul", [r.value(inputs[0])] * 2, [r.names[int(outputs[0])]], {})


def squared_difference(r: Reader, op, inputs, outputs) -> None:
    diff = r.fresh(f"{r.names[int(outputs[0])]}_difference")
    r.emit("Sub", [r.value(inputs[0]), r.value(inputs[1])], [diff], {})
    r.emit("Mul", [diff, diff], [r.names[int(outputs[0])]], {})


def floor_div(r: Reader, op, inputs, outputs) -> None:
    quotient = r.fresh(f"{r.names[int(outputs[0])]}_quotient")
    r.emit("Div", [r.value(inputs[0]), r.value(inputs[1])], [quotient], {})
    r.emit("Floor", [quotient], [r.names[int(outputs[0])]], {})


def floor_div_int(r: Reader, op, inputs, outputs) -> None:
    """Integer FLOOR_DIV: (a - floor_mod(a, b)) / b, a division without remainder (Div truncates)."""
    a, b, y = r.value(inputs[0]), r.value(inputs[1]), r.names[int(outputs[0])]
    remainder, exact = r.fresh(f"{y}_remainder"), r.fresh(f"{y}_exact")
    r.emit("Mod", [a, b], [remainder], {})
    r.emit("Sub", [a, remainder], [exact], {})
    r.emit("Div", [exact, b], [y], {})


def leaky_relu(r: Reader, op, inputs, outputs) -> None:
    alpha = float(options(op, "LeakyReluOptions").Alpha())
    r.emit("LeakyRelu", [r.value(inputs[0])], [r.names[int(outputs[0])]], {"alpha": alpha})


def gelu(r: Reader, op, inputs, outputs) -> None:
    approximate = options(op, "GeluOptions").Approximate()
    r.emit("Gelu", [r.value(inputs[0])], [r.names[int(outputs[0])]], {"approximate": "tanh" if approximate else "none"})


def log_softmax(r: Reader, op, inputs, outputs) -> None:
    r.emit("LogSoftmax", [r.value(inputs[0])], [r.names[int(outputs[0])]], {"axis": -1})


def l2_normalization(r: Reader, op, inputs, outputs) -> None:
    """x / max(sqrt(sum of squares over the last axis), 1e-6), TFLite's reference L2Normalization."""
    x, y = r.value(inputs[0]), int(outputs[0])
    name = r.names[y]
    squares, total, norm, floor = (r.fresh(f"{name}_{s}") for s in ("squares", "sum", "norm", "floored"))
    r.emit("Mul", [x, x], [squares], {})
    r.emit("ReduceSum", [squares, r.int64(f"{name}_axes", [-1])], [total], {"keepdims": 1})
    r.emit("Sqrt", [total], [norm], {})
    r.emit("Max", [norm, r.add_constant(f"{name}_epsilon", np.float32(1e-6))], [floor], {})
    r.emit_activated("Div", [x, floor], y, {}, options(op, "L2NormOptions").FusedActivationFunction())


def batch_matmul(r: Reader, op, inputs, outputs) -> None:
    r.emit("MatMul", batch_matmul_operands(r, op, inputs), [r.names[int(outputs[0])]], {})


def batch_matmul_operands(r: Reader, op, inputs) -> list[str]:
    """BATCH_MATMUL's two operands as MatMul takes them: each adjoint one (adj_x, adj_y) transposed
    in its last two axes."""
    opts = options(op, "BatchMatMulOptions")
    operands = []
    for i, adjoint in ((inputs[0], opts.AdjX()), (inputs[1], opts.AdjY())):
        value = r.value(i)
        if adjoint:
            rank = len(r.shape(i))
            swapped = r.fresh(f"{r.names[int(i)]}_adjoint")
            r.emit("Transpose", [value], [swapped], {"perm": list(range(rank - 2)) + [rank - 1, rank - 2]})
            value = swapped
        operands.append(value)
    return operands


def transpose_conv(r: Reader, op, inputs, outputs) -> None:
    """TRANSPOSE_CONV(output_shape, weights [O, kh, kw, I], x, bias)."""
    opts = options(op, "TransposeConvOptions")
    bias = int(inputs[3]) if len(inputs) > 3 and inputs[3] >= 0 else None
    _transpose_conv(r, int(inputs[1]), int(inputs[2]), bias, int(outputs[0]), opts.Padding() == 0,
                    (opts.StrideH(), opts.StrideW()), opts.FusedActivationFunction())


# MediaPipe's custom operator Convolution2DTransposeBias: options are TFLite's C struct
# TfLiteTransposeConvParams as raw bytes: padding (1 SAME, 2 VALID), stride_width, stride_height
_MEDIAPIPE_PADDING = {1: True, 2: False}


def transpose_conv_bias(r: Reader, op, inputs, outputs) -> None:
    """Convolution2DTransposeBias(x, weights [O, kh, kw, I], bias): TRANSPOSE_CONV with a bias, the
    output shape its tensor's (MediaPipe's kernel derives the same from the padding)."""
    raw = op.CustomOptionsAsNumpy()
    raw = raw.tobytes() if isinstance(raw, np.ndarray) else b""
    padding, stride_w, stride_h = (np.frombuffer(raw[:12], "<i4").tolist() if len(raw) >= 12 else (0, 0, 0))
    if padding not in _MEDIAPIPE_PADDING or stride_w < 1 or stride_h < 1:
        raise Unsupported(f"its options (padding {padding}, strides {stride_h} x {stride_w}) are not MediaPipe's "
                          f"TfLiteTransposeConvParams (12 bytes: padding SAME 1 or VALID 2, positive strides)")
    _transpose_conv(r, int(inputs[1]), int(inputs[0]), int(inputs[2]), int(outputs[0]), _MEDIAPIPE_PADDING[padding],
                    (stride_h, stride_w), 0)


def _transpose_conv(r: Reader, w: int, x: int, bias: int | None, y: int, same: bool, strides, code: int) -> None:
    """ONNX's ConvTranspose on NCHW, the padding TFLite derives from the output shape (the odd extra
    row cut at the end)."""
    o, kh, kw, i = r.shape(w)
    _, h, wd, _ = r.shape(x)
    _, oh, ow, _ = r.shape(y)
    pads, extra = [], []
    for size, out, k, s in ((h, oh, kh, strides[0]), (wd, ow, kw, strides[1])):
        total = max((size - 1) * s + k - out, 0) if same else 0
        begin = total // 2
        end = (size - 1) * s + k - begin - out  # what ONNX's output size formula must cut at the end
        pads.append((begin, max(end, 0)))
        extra.append(max(-end, 0))
    weights = _weights(r, w, np.transpose(r.constant_data(w, "TRANSPOSE_CONV filter"), (3, 0, 1, 2)))
    attrs = {"strides": list(strides), "kernel_shape": [kh, kw], "output_padding": extra,
             "pads": [pads[0][0], pads[1][0], pads[0][1], pads[1][1]]}
    _via_nchw(r, r.value(x), y, "ConvTranspose", [weights, *([r.value(bias)] if bias is not None else [])], attrs,
              code)


def dequantize_float16(r: Reader, op, inputs, outputs) -> None:
    """DEQUANTIZE of float16 weights (TensorFlow's float16 quantization): float32 constants at build
    time, as exact as TFLite's conversion (every float16 is a float32)."""
    values = r.constant_data(int(inputs[0]), "float16 tensor")
    if r.dtype(int(outputs[0])) != "float32":
        raise Unsupported(f"a float16 tensor dequantized to {r.dtype(int(outputs[0]))} (TFLite's is float32)")
    r.set_constant(int(outputs[0]), values.astype(np.float32))


def floor_mod(r: Reader, op, inputs, outputs) -> None:
    """x - floor(x / y) * y: the remainder with the divisor's sign, as TensorFlow's FloorMod."""
    a, b, y = r.value(inputs[0]), r.value(inputs[1]), int(outputs[0])
    quotient, floored, product = (r.fresh(f"{r.names[y]}_{s}") for s in ("quotient", "floor", "product"))
    r.emit("Div", [a, b], [quotient], {})
    r.emit("Floor", [quotient], [floored], {})
    r.emit("Mul", [floored, b], [product], {})
    r.emit("Sub", [a, product], [r.names[y]], {})
