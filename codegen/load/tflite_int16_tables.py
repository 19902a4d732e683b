"""TFLite's int16 operators that TFLite Micro computes through interpolated tables, with its
Prepare's parameters: LOGISTIC and TANH (Int16Activation: the 256-entry sigmoid table, the input
rescaled to its scale by TFLite Micro's multiplier and shift), SOFTMAX (Int16Softmax: the exp and
1 / (1 + x) tables); GELU (Int16Lookup: TFLite's 513-entry table of the float function over the
input's range, which LiteRT computes; TFLite Micro does not register GELU). HARD_SWISH on int16 is
refused: neither TFLite Micro nor TFLite runs it."""
from __future__ import annotations

import math

import numpy as np

from tinsmith.load.tflite_reader import Reader, Unsupported, options
from tinsmith.load.tflite_tables import gelu_float32
from tinsmith.ops import quantized_int16 as softmax16
from tinsmith.ops.quantized_recurrent import SIGMOID_TABLE

INPUT_INTEGER_BITS = 3  # the table's input range: [-8, 8) at scale 2^-12, widened by 3/4 to [-10.7, 10.7)
OUTPUT_FRACTION_BITS = 15
# the input shifts at which a power-of-two input scale is taken as it is (multiplier 0); other
# scales go through the general multiplier
POWER_OF_TWO_SHIFTS = {"sigmoid": (0,), "tanh": (0, 1)}
MAX_LEFT_SHIFT = 30  # (the int32 rounding term 1 << (shift - 1) of a larger shift would overflow)
MAX_MULTIPLIER = 32767  # (TFLite Micro's bound: a larger one overflows the int32 product x * multiplier)


def checked_log2(scale: float) -> tuple[bool, int]:
    """TFLite's CheckedLog2 in float32: (whether the scale is a power of two within 1e-3 of its
    exponent, the rounded exponent); (False, 0) for a scale float32 cannot hold (0 or infinite)."""
    if not 0.0 < float(np.float32(scale)) < math.inf:
        return False, 0
    log2 = np.float32(np.float32(math.log(np.float32(scale))) * np.float32(1.0 / np.float32(math.log(2.0))))
    rounded = float(np.sign(log2) * np.floor(abs(float(log2)) + 0.5))
    return abs(float(np.float32(log2 - np.float32(rounded)))) < 1e-3, int(rounded)


def activation_scaling(function: str, x_scale: float) -> tuple[int, int]:
    """(input_multiplier, input_left_shift) as TFLite Micro's int16 LOGISTIC / TANH Prepare derives
    them: multiplier 0 for the power-of-two scales the table takes as they are, otherwise the
    scale times 3 * 4096 doubled up past 2^14 (at most 31 times) and truncated."""
    power_of_two, log2 = checked_log2(x_scale)
    shift = (15 - INPUT_INTEGER_BITS) + log2
    if power_of_two and shift in POWER_OF_TWO_SHIFTS[function]:
        return 0, shift
    multiplier, shift = float(np.float32(x_scale)) * 4096.0 * 3.0, 0
    while multiplier <= 32767.0 / 2.0 and shift <= 30:
        shift += 1
        multiplier *= 2.0
    return int(multiplier), shift


def shared_table(r: Reader, name: str, data: np.ndarray) -> str:
    """A table constant every node that reads the same one shares (one copy in flash)."""
    if name in r.constants and np.array_equal(r.constants[name].data, data):
        return name
    return r.add_constant(name, data)


def sigmoid_table(r: Reader) -> str:
    """TFLite's 256-entry sigmoid table of the int16 LOGISTIC, TANH and the integer LSTM's gates."""
    return shared_table(r, "int16_sigmoid_table", np.array(SIGMOID_TABLE, np.int32))


def _check_int16(r: Reader, x: int, y: int, name: str) -> None:
    if r.dtype(y) != "int16":
        raise Unsupported(f"an int16 input with a {r.dtype(y)} output (TFLite's is int16)")
    zero_points = (r.scale_zp(x)[1], r.scale_zp(y)[1])
    if zero_points != (0, 0):
        raise Unsupported(f"int16 {name} with input and output zero points {zero_points[0]} and {zero_points[1]} "
                          f"(TFLite requires 0)")


def activation(function: str):
    def read(r: Reader, op, inputs, outputs) -> None:
        """int16 LOGISTIC (function sigmoid) or TANH onto Int16Activation."""
        x, y = int(inputs[0]), int(outputs[0])
        name = "LOGISTIC" if function == "sigmoid" else "TANH"
        _check_int16(r, x, y, name)
        power_of_two, log2 = checked_log2(r.scale_zp(y)[0])
        if not power_of_two or log2 != -OUTPUT_FRACTION_BITS:
            raise Unsupported(f"int16 {name} with output scale {r.scale_zp(y)[0]} (TFLite requires 2^-15)")
        x_scale = r.scale_zp(x)[0]
        if float(np.float32(x_scale)) * 12288.0 > MAX_MULTIPLIER:
            raise Unsupported(f"int16 {name} with input scale {x_scale}, too large for TFLite's int32 rescaling "
                              f"(it takes scales up to {MAX_MULTIPLIER / 12288.0:.3g})")
        multiplier, shift = activation_scaling(function, x_scale)
        if shift > MAX_LEFT_SHIFT:
            raise Unsupported(f"int16 {name} with input scale {x_scale}, too small for TFLite's "
                              f"int32 rescaling (its input shift would be {shift})")
        r.emit("Int16Activation", [r.value(x), sigmoid_table(r)], [r.names[y]],
               {"function": function, "input_multiplier": multiplier, "input_left_shift": shift})
    return read


def softmax(r: Reader, op, inputs, outputs) -> None:
    """int16 SOFTMAX onto Int16Softmax, its tables built here as TFLite Micro's Prepare builds them."""
    x, y = int(inputs[0]), int(outputs[0])
    _check_int16(r, x, y, "SOFTMAX")
    y_scale = r.scale_zp(y)[0]
    if abs(np.float32(y_scale) - np.float32(1.0 / 32768)) > np.float32(0.001 / 32768):
        raise Unsupported(f"int16 SOFTMAX with output scale {y_scale} (TFLite requires 2^-15)")
    beta = float(options(op, "SoftmaxOptions").Beta())
    if not 0.0 < beta < math.inf:
        raise Unsupported(f"int16 SOFTMAX with beta {beta} (TFLite Micro's int16 softmax takes a positive beta)")
    multiplier, shift = softmax16.softmax_scaling(beta, r.scale_zp(x)[0])
    tables = [shared_table(r, f"int16_softmax_{f}_table", softmax16.int16_table(f)) for f in ("exp", "reciprocal")]
    r.emit("Int16Softmax", [r.value(x), *tables], [r.names[y]],
           {"input_multiplier": multiplier, "input_left_shift": shift})


def hard_swish(r: Reader, op, inputs, outputs) -> None:
    raise Unsupported("int16 data: neither TFLite Micro nor TFLite runs HARD_SWISH on int16 (both take float32 "
                      "and int8), so there is no reference to be exact with")


def gelu(r: Reader, op, inputs, outputs) -> None:
    """int16 GELU as TFLite's LUTPopulate<int16_t> builds its table: the float function over the
    input's whole range [scale * -32768, scale * 32767] in 512 steps, scaled by 2^16 over the
    output's range; each element the table's interpolation at its value (Int16Lookup)."""
    x, y = int(inputs[0]), int(outputs[0])
    _check_int16(r, x, y, "GELU")
    f32 = np.float32
    x_scale, y_scale = f32(r.scale_zp(x)[0]), f32(r.scale_zp(y)[0])
    inverse = f32(f32(65536.0) / f32(y_scale * f32(32767.0) - y_scale * f32(-32768.0)))
    approximate = bool(options(op, "GeluOptions").Approximate())
    values = softmax16.interpolated_table(lambda v: gelu_float32(v, approximate), f32(x_scale * f32(-32768.0)),
                                          f32(x_scale * f32(32767.0)), inverse)
    r.emit("Int16Lookup", [r.value(x), r.add_constant(f"{r.names[y]}_table", values)], [r.names[y]],
           {"y_scale": float(y_scale)})
