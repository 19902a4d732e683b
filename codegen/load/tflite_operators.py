"""The TFLite builtin operators Tinsmith imports: one registration each, naming the element types it
takes (of the input that decides it) and the converter for each. An operator with no row here, or an
element type its row lacks, is refused at import with the operator's index and name."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from tinsmith.load import tflite_float as flt
from tinsmith.load import tflite_int16_tables as t16
from tinsmith.load import tflite_quantized as q
from tinsmith.load import tflite_quantized_composite as qc
from tinsmith.load import tflite_recurrent as rec
from tinsmith.load import tflite_variables as var
from tinsmith.load import tflite_control as ctl
from tinsmith.load import tflite_signal as sig
from tinsmith.load import tflite_sparse as sparse
from tinsmith.load import tflite_tensor_ops as t

Converter = Callable  # (reader, operator, input tensor indices, output tensor indices) -> None
FLOAT = ("float32",)
INTEGERS = ("int8", "uint8", "int16", "int32", "int64")
EVERY = FLOAT + INTEGERS + ("bool",)  # element types the operators that only move elements take
COMPARABLE = FLOAT + INTEGERS
Q_ELEMENTWISE = ("int8", "int16")  # quantized operators TFLite runs on int8 and 16x8 data alike


ANY = "any"  # the converter of an operator no element type decides (subgraph calls, resource handles)


@dataclass(frozen=True)
class Rule:
    """One builtin operator: its converter per element type, the inputs (and outputs) it needs at
    least, and which input's element type decides (the data input; SPLIT's is its second; None: no
    data decides, one converter under ANY)."""

    converters: Mapping[str, Converter]
    min_inputs: int = 1
    typed_by: int | None = 0
    min_outputs: int = 1

    @property
    def types(self) -> tuple[str, ...]:
        return tuple(self.converters)


def each(converter: Converter, types=EVERY) -> dict[str, Converter]:
    return {dtype: converter for dtype in types}


def _unary_float(onnx_op: str, **attrs) -> Rule:
    return Rule(each(flt.unary(onnx_op, **attrs), FLOAT))


OPERATORS: dict[str, Rule] = {
    # --- convolutions, matrix products, pools -----------------------------------------------
    "CONV_2D": Rule({"float32": flt.conv, "int8": q.conv, "int16": q.conv}, 2),
    "DEPTHWISE_CONV_2D": Rule({"float32": flt.depthwise, "int8": q.depthwise, "int16": q.depthwise}, 2),
    "FULLY_CONNECTED": Rule({"float32": flt.fully_connected, "int8": q.fully_connected, "int16": q.fully_connected},
                            2),
    "TRANSPOSE_CONV": Rule({"float32": flt.transpose_conv, "int8": qc.transpose_conv, "int16": qc.transpose_conv}, 3,
                           typed_by=2),
    "BATCH_MATMUL": Rule({"float32": flt.batch_matmul, "int8": qc.batch_matmul, "int16": qc.batch_matmul_int16}, 2),
    "AVERAGE_POOL_2D": Rule({"float32": flt.pool("AveragePoolNHWC"), **each(q.pool("QAvgPool"), Q_ELEMENTWISE)}),
    "MAX_POOL_2D": Rule({"float32": flt.pool("MaxPoolNHWC"), **each(q.pool("QMaxPool"), Q_ELEMENTWISE)}),
    # --- arithmetic ---------------------------------------------------------------------------
    "ADD": Rule({**each(flt.binary("Add", "AddOptions"), ("float32", "int32")),
                 **each(q.binary("add"), Q_ELEMENTWISE)}, 2),
    "MUL": Rule({**each(flt.binary("Mul", "MulOptions"), ("float32", "int32")),
                 **each(q.binary("mul"), Q_ELEMENTWISE)}, 2),
    "SUB": Rule({**each(flt.binary("Sub", "SubOptions"), ("float32", "int32")),
                 **each(q.binary("sub"), Q_ELEMENTWISE)}, 2),
    "DIV": Rule({**each(flt.binary("Div", "DivOptions"), ("float32", "int32")), "int8": q.div_int8}, 2),  # int32: truncating
    "FLOOR_DIV": Rule({"float32": flt.floor_div, "int32": flt.floor_div_int}, 2),
    "FLOOR_MOD": Rule({"float32": flt.floor_mod, "int32": flt.binary("Mod", None)}, 2),
    "POW": Rule(each(flt.binary("Pow", None), FLOAT), 2),
    "SQUARED_DIFFERENCE": Rule({**each(flt.squared_difference, ("float32", "int32")),  # int32: wrapping
                                **each(q.binary("squared_difference"), Q_ELEMENTWISE)}, 2),
    "ADD_N": Rule({"float32": t.extremum("Sum"), "int8": qc.add_n}),
    "MAXIMUM": Rule(each(t.extremum("Max"), COMPARABLE), 2),
    "MINIMUM": Rule(each(t.extremum("Min"), COMPARABLE), 2),
    # --- activations and elementwise math ------------------------------------------------------
    "RELU": Rule({"float32": flt.unary("Relu"), **each(q.relu("relu"), Q_ELEMENTWISE)}),
    "RELU6": Rule({"float32": flt.clamp(0.0, 6.0), **each(q.relu6, Q_ELEMENTWISE)}),
    "RELU_N1_TO_1": Rule(each(flt.clamp(-1.0, 1.0), FLOAT)),
    "RELU_0_TO_1": Rule(each(flt.clamp(0.0, 1.0), FLOAT)),
    "LOGISTIC": Rule({"float32": flt.unary("Sigmoid"), "int8": q.table_function("logistic"),
                      "int16": t16.activation("sigmoid")}),
    "TANH": Rule({"float32": flt.unary("Tanh"), "int8": q.table_function("tanh"), "int16": t16.activation("tanh")}),
    "LEAKY_RELU": Rule({"float32": flt.leaky_relu, "int8": q.leaky_relu, "int16": q.leaky_relu_int16}),
    "PRELU": Rule({"float32": flt.binary("PRelu", None), **each(qc.prelu, Q_ELEMENTWISE)}, 2),
    "HARD_SWISH": Rule({"float32": flt.unary("HardSwish"), "int8": q.hard_swish, "int16": t16.hard_swish}),
    "ELU": Rule({"float32": flt.unary("Elu", alpha=1.0), "int8": q.elu}),
    "GELU": Rule({"float32": flt.gelu, "int8": q.gelu, "int16": t16.gelu}),
    "EXP": _unary_float("Exp"), "LOG": _unary_float("Log"), "SQRT": _unary_float("Sqrt"),
    "RSQRT": Rule({"float32": flt.chain("Sqrt", "Reciprocal"), "int8": q.rsqrt_int8, "int16": q.rsqrt_int16}),
    "SIN": _unary_float("Sin"), "COS": _unary_float("Cos"), "FLOOR": _unary_float("Floor"),
    "CEIL": _unary_float("Ceil"), "ROUND": _unary_float("Round"), "SIGN": _unary_float("Sign"),
    "ABS": Rule({"float32": flt.unary("Abs"), "int8": q.abs_, "int16": qc.abs_int16}), "NEG": _unary_float("Neg"),
    "SQUARE": Rule(each(flt.square, FLOAT)),
    "SOFTMAX": Rule({"float32": flt.softmax, "int8": q.softmax, "int16": t16.softmax}),
    "LOG_SOFTMAX": Rule({"float32": flt.log_softmax, "int8": q.log_softmax}),
    "L2_NORMALIZATION": Rule({"float32": flt.l2_normalization, "int8": q.l2_normalization}),
    # --- recurrent layers, with state kept between invocations (tflite_recurrent.py) -------------
    "UNIDIRECTIONAL_SEQUENCE_LSTM": Rule({"float32": rec.lstm_float, "int8": rec.lstm_int8, "int16": rec.lstm_16x8}),
    "SVDF": Rule({"float32": rec.svdf_float, "int8": rec.svdf_int8, "int16": rec.svdf_int16}, 3),
    # --- resource variables (state kept between invocations) and CALL_ONCE's init subgraph --------
    "CALL_ONCE": Rule({ANY: var.call_once}, 0, None, 0),
    "VAR_HANDLE": Rule({ANY: var.var_handle}, 0, None),
    "READ_VARIABLE": Rule({ANY: var.read_variable}, 1, None),
    "ASSIGN_VARIABLE": Rule({ANY: var.assign_variable}, 2, None, 0),
    # --- control flow: subgraphs expanded when the graph is built (tflite_control.py) ---------------
    "IF": Rule({ANY: ctl.if_}, 1, None),
    "WHILE": Rule({ANY: ctl.while_}, 1, None),
    # --- quantization -------------------------------------------------------------------------
    "QUANTIZE": Rule(each(q.quantize, ("float32", "int8", "uint8", "int16", "int32"))),
    "DEQUANTIZE": Rule({**each(q.dequantize, ("int8", "uint8", "int16")), "float16": flt.dequantize_float16}),
    "DENSIFY": Rule(each(sparse.densify, EVERY + ("float16",))),  # (a sparse constant, densified at build time)
    # --- reductions ---------------------------------------------------------------------------
    "MEAN": Rule({"float32": t.reduce("ReduceMean"), **each(qc.mean, Q_ELEMENTWISE)}, 2),
    "SUM": Rule({**each(t.reduce("ReduceSum"), ("float32", "int32")), **each(qc.sum_, Q_ELEMENTWISE)}, 2),
    "REDUCE_PROD": Rule(each(t.reduce("ReduceProd"), ("float32", "int32")), 2),
    "REDUCE_MAX": Rule(each(t.reduce("ReduceMax", picks=True), COMPARABLE), 2),
    "REDUCE_MIN": Rule(each(t.reduce("ReduceMin", picks=True), COMPARABLE), 2),
    "REDUCE_ANY": Rule(each(t.reduce("ReduceMax"), ("bool",)), 2),
    "REDUCE_ALL": Rule(each(t.reduce("ReduceMin"), ("bool",)), 2),
    "ARG_MAX": Rule(each(t.arg("ArgMax"), COMPARABLE), 2),
    "ARG_MIN": Rule(each(t.arg("ArgMin"), COMPARABLE), 2),
    "CUMSUM": Rule({**each(t.cumsum, ("float32", "int32")), "int8": qc.cumsum_int8}, 2),
    # --- comparisons and logic ----------------------------------------------------------------
    "EQUAL": Rule(each(t.compare("Equal"), EVERY), 2),
    "NOT_EQUAL": Rule(each(t.compare("Equal", negate=True), EVERY), 2),
    "LESS": Rule(each(t.compare("Less"), COMPARABLE), 2),
    "LESS_EQUAL": Rule(each(t.compare("LessOrEqual"), COMPARABLE), 2),
    "GREATER": Rule(each(t.compare("Greater"), COMPARABLE), 2),
    "GREATER_EQUAL": Rule(each(t.compare("GreaterOrEqual"), COMPARABLE), 2),
    "LOGICAL_AND": Rule(each(t.logical("And"), ("bool",)), 2),
    "LOGICAL_OR": Rule(each(t.logical("Or"), ("bool",)), 2),
    "LOGICAL_NOT": Rule(each(t.logical("Not"), ("bool",))),
    "SELECT": Rule(each(t.select), 3, typed_by=1),
    "SELECT_V2": Rule(each(t.select), 3, typed_by=1),
    # --- moving elements (every element type) --------------------------------------------------
    "RESHAPE": Rule(each(t.reshape)), "SQUEEZE": Rule(each(t.reshape)), "EXPAND_DIMS": Rule(each(t.reshape)),
    "TRANSPOSE": Rule(each(t.transpose), 2),
    "SLICE": Rule(each(t.slice_), 3),
    "STRIDED_SLICE": Rule(each(t.strided_slice), 3),
    "CONCATENATION": Rule({**each(t.concat), "float32": flt.concat, "int8": q.concat}),
    "PACK": Rule(each(t.pack)),
    "UNPACK": Rule(each(t.unpack)),
    "SPLIT": Rule(each(t.split), 2, typed_by=1),
    "SPLIT_V": Rule(each(t.split_v), 3),
    "GATHER": Rule(each(t.gather), 2),
    "GATHER_ND": Rule(each(t.gather_nd), 2),
    "EMBEDDING_LOOKUP": Rule({"float32": t.embedding_lookup, "int8": qc.embedding_lookup_int8}, 2, typed_by=1),
    "PAD": Rule({**each(flt.pad, ("float32", "int32")), **each(q.pad, Q_ELEMENTWISE)}, 2),
    "PADV2": Rule(each(flt.pad, ("float32", "int32") + Q_ELEMENTWISE), 3),  # int8, int16: the value as stored
    "MIRROR_PAD": Rule(each(t.mirror_pad, ("float32", "int32", "int8")), 2),
    "REVERSE_V2": Rule(each(t.reverse), 2),
    "SPACE_TO_BATCH_ND": Rule(each(t.space_to_batch, ("float32", "int8")), 3),
    "BATCH_TO_SPACE_ND": Rule(each(t.batch_to_space, ("float32", "int8")), 3),
    "DEPTH_TO_SPACE": Rule(each(t.depth_to_space)),
    "SPACE_TO_DEPTH": Rule(each(t.space_to_depth)),
    "RESIZE_BILINEAR": Rule({"float32": t.resize("linear"), "int8": qc.resize_bilinear}, 2),
    "RESIZE_NEAREST_NEIGHBOR": Rule({**each(t.resize_nearest_by_gather), "float32": t.resize("nearest")}, 2),
    "BROADCAST_TO": Rule(each(t.broadcast_to), 2),
    "TILE": Rule(each(t.tile), 2),
    "CAST": Rule(each(t.cast, EVERY + ("uint16", "uint32", "uint64"))),  # (the signal library's spectra)
    # --- shapes, folded at build time ----------------------------------------------------------
    "SHAPE": Rule(each(t.shape)), "RANK": Rule(each(t.rank)),
    "ZEROS_LIKE": Rule(each(t.zeros_like)),
    "FILL": Rule(each(t.fill), 2, typed_by=1),  # typed by the value
    "RANGE": Rule(each(t.range_, ("float32", "int32", "int64")), 3),
}

# Custom operators Tinsmith compiles (TFLite Micro's signal library), by the name the importer
# gives a custom operator: CUSTOM:code
CUSTOM_OPERATORS: dict[str, Rule] = {
    **{f"CUSTOM:{code}": Rule(each(convert, types), need)
       for code, (types, convert, need) in sig.SIGNAL_OPERATORS.items()},
    # MediaPipe's transposed convolution with a bias (its segmentation models)
    "CUSTOM:Convolution2DTransposeBias": Rule({"float32": flt.transpose_conv_bias}, 3),
}

# Custom operators: what a model that holds one is told
NPU_CODES = {"ethos-u": "an Arm Ethos-U NPU", "edgetpu-custom-op": "a Google Edge TPU"}
SIGNAL_PREFIX = "Signal"  # TFLite Micro's signal library (Window, Rfft, FilterBank, ... as SignalWindow, ...)
# MediaPipe's own custom operators (its op resolver registers them; TFLite's runtimes do not)
MEDIAPIPE_CODES = ("Landmarks2TransformMatrix", "TransformTensorBilinear", "TransformLandmarks",
                   "MaxPoolingWithArgmax2D", "MaxUnpooling2D")


def custom_operator_problem(code: str) -> str:
    """Why a CUSTOM operator with custom code `code` cannot be compiled."""
    if code.lower() in NPU_CODES:
        return (f"the custom operator '{code}' runs a subgraph compiled for {NPU_CODES[code.lower()]}; Tinsmith "
                f"compiles for the CPU and does not drive NPUs (compile the model before it went through the NPU's "
                f"compiler, e.g. Vela)")
    if code.startswith(SIGNAL_PREFIX):
        return (f"the custom operator '{code}' of TFLite Micro's signal library (audio front end) is not yet "
                f"supported by Tinsmith (it compiles {', '.join(sig.SIGNAL_OPERATORS)})")
    if code in MEDIAPIPE_CODES:
        return (f"the custom operator '{code}' is one of MediaPipe's own (its op resolver registers it, TFLite's "
                f"runtimes do not); Tinsmith compiles MediaPipe's Convolution2DTransposeBias, not this one")
    return f"the custom operator '{code}' is not a TFLite builtin; Tinsmith cannot compile it"
