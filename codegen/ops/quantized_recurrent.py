"""Int16Activation: TFLite's int16 sigmoid and tanh (its reference integer kernels, which TFLite
Micro's integer LSTM applies to its gates and cell state): the input scaled by 3 * 2^shift (or
3 / 2^shift, rounded), then interpolated in a 256-entry table of sigmoid(i / 24) in 0.16 fixed
point (input 1, a constant), tanh through tanh(x) = 2 sigmoid(2x) - 1; outputs in Q0.15.
"""
from __future__ import annotations

import numpy as np

from tinsmith.ir import TensorType
from tinsmith.ir.graph import Quant
from tinsmith.ops.registry import Attr, InferArgs, OpError, define, elementwise_facts

FUNCTIONS = ("sigmoid", "tanh")
# sigmoid(i / 24) in 0.16 fixed point, i = 0..255, as TFLite's integer kernels hold it (not quite
# round(65536 * sigmoid(i / 24)): some entries are one more). Read from TFLite Micro's int16 TANH at
# the inputs that land on each entry; tests/test_tflite_recurrent.py reads them again.
SIGMOID_TABLE = (
    32768, 33451, 34133, 34813, 35493, 36169, 36843, 37513, 38180, 38841, 39498, 40149, 40794,
    41432, 42064, 42688, 43304, 43912, 44511, 45102, 45683, 46255, 46817, 47369, 47911, 48443,
    48964, 49475, 49975, 50464, 50942, 51409, 51865, 52311, 52745, 53169, 53581, 53983, 54374,
    54755, 55125, 55485, 55834, 56174, 56503, 56823, 57133, 57433, 57724, 58007, 58280, 58544,
    58800, 59048, 59288, 59519, 59743, 59959, 60168, 60370, 60565, 60753, 60935, 61110, 61279,
    61441, 61599, 61750, 61896, 62036, 62172, 62302, 62428, 62549, 62666, 62778, 62886, 62990,
    63090, 63186, 63279, 63368, 63454, 63536, 63615, 63691, 63765, 63835, 63903, 63968, 64030,
    64090, 64148, 64204, 64257, 64308, 64357, 64405, 64450, 64494, 64536, 64576, 64614, 64652,
    64687, 64721, 64754, 64786, 64816, 64845, 64873, 64900, 64926, 64950, 64974, 64997, 65019,
    65039, 65060, 65079, 65097, 65115, 65132, 65149, 65164, 65179, 65194, 65208, 65221, 65234,
    65246, 65258, 65269, 65280, 65291, 65301, 65310, 65319, 65328, 65337, 65345, 65352, 65360,
    65367, 65374, 65381, 65387, 65393, 65399, 65404, 65410, 65415, 65420, 65425, 65429, 65433,
    65438, 65442, 65445, 65449, 65453, 65456, 65459, 65462, 65465, 65468, 65471, 65474, 65476,
    65479, 65481, 65483, 65485, 65488, 65489, 65491, 65493, 65495, 65497, 65498, 65500, 65501,
    65503, 65504, 65505, 65507, 65508, 65509, 65510, 65511, 65512, 65513, 65514, 65515, 65516,
    65517, 65517, 65518, 65519, 65520, 65520, 65521, 65522, 65522, 65523, 65523, 65524, 65524,
    65525, 65525, 65526, 65526, 65526, 65527, 65527, 65528, 65528, 65528, 65529, 65529, 65529,
    65529, 65530, 65530, 65530, 65530, 65531, 65531, 65531, 65531, 65531, 65532, 65532, 65532,
    65532, 65532, 65532, 65533, 65533, 65533, 65533, 65533, 65533, 65533, 65533, 65534, 65534,
    65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65535,
)
# per function: how many low bits of |v| interpolate between entries, the saturated result, and
# the final shift back to 16 bits
FRACTION_BITS = {"sigmoid": 9, "tanh": 8}
SATURATED = {"sigmoid": 0x7FFF << 10, "tanh": 0xFFFF << 8}


def scaling(attrs) -> tuple[int, int, int]:
    """(multiplier, right shift, rounding) taking the int16 input to the table's scale: TFLite's
    power-of-two case (multiplier 0) multiplies by 3 << left_shift."""
    multiplier, shift = attrs["input_multiplier"], attrs["input_left_shift"]
    if multiplier == 0:
        return 3 << shift, 0, 0
    return multiplier, shift, (1 << (shift - 1)) if shift > 0 else 0


def reference(xs, attrs):
    x, table = xs[0].astype(np.int64), xs[1].astype(np.int64)
    multiplier, shift, rounding = scaling(attrs)
    fn = attrs["function"]
    bits = FRACTION_BITS[fn]
    v = (x * multiplier + rounding) >> shift
    a = np.abs(v)
    uh, ut = a >> bits, a & ((1 << bits) - 1)
    at = np.minimum(uh, 254)
    ua, ub = table[at], table[at + 1]
    r = np.where(uh >= 255, SATURATED[fn], (ua << bits) + ut * (ub - ua))
    if fn == "sigmoid":
        r = np.where(v >= 0, r + (1 << 9), (1 << 25) - r + (1 << 9) - 1) >> 10
    else:
        r = np.where(v >= 0, r - (1 << 23) + (1 << 7), -r + (1 << 23) + (1 << 7) - 1) >> 8
    return [r.astype(np.int16)]


def _infer(args: InferArgs) -> list[TensorType]:
    x, table = args.types
    if x.dtype != "int16":
        raise OpError(f"input 0 has element type {x.dtype}, expected int16", input=0)
    if table.dtype != "int32" or table.shape != (256,) or args.values[1] is None:
        raise OpError(f"the table must be a constant int32[256], got {table}", input=1)
    if args.attrs["input_multiplier"] < 0 or not 0 <= args.attrs["input_left_shift"] <= 30:
        raise OpError("input_multiplier must be at least 0 and input_left_shift within 0..30",
                      attr="input_left_shift")
    return [TensorType("int16", x.shape, Quant((1.0 / 32768,), (0,)))]


define("Int16Activation", inputs=2, infer=_infer, reference=reference, constant_inputs=(1,),
       prepare=elementwise_facts(inputs=(0,)),
       attrs=[Attr("function", "string", "sigmoid", FUNCTIONS), Attr("input_multiplier", "int", 0),
              Attr("input_left_shift", "int", 0)])
