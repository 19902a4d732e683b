"""The many small operators (activations, math, comparisons and logic, layout, indexing, reductions,
Resize, Cast), against ONNX Runtime and against NumPy written here.

Each case is a tiny computation declared once and turned into both an ONNX model (run by ONNX
Runtime for the expected values) and graph YAML (compiled by Tinsmith). Cases are grouped, one
graph per group, and every group is built by ONE SCons run; each runner runs once. The same
graphs also go through the NumPy references (tinsmith.reference), without compiling.

Graph inputs are float32; cases that need int64 or bool data make it in the graph (Cast,
Greater), in the ONNX model and the YAML alike. The attribute combinations follow the ONNX
backend node tests of each op.

Tolerance for float outputs: rtol=1e-5, atol=1e-6. Kernels and ONNX Runtime both compute in
float32 from the same inputs, in different orders; each output is a few roundings (6e-8 each),
a libm call, or a sum of at most 24 terms away from the inputs. Measured, the largest difference
uses 31% of the allowed one (Resize, half_pixel_symmetric); the largest absolute one is 8e-7.
Integer and bool outputs are exact.
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import onnx
import onnxruntime
import pytest
import yaml
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from tinsmith.ir import TensorType
from tinsmith.ops import PRIMITIVES, InferArgs, OpError, check_attrs
from tinsmith.pipeline import lower
from tinsmith.reference import evaluate
from tinsmith.tolerance import within_tolerance

RTOL, ATOL = 1e-5, 1e-6
FLOAT, INT64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


# --- declaring cases ---------------------------------------------------------------------------
@dataclass
class Case:
    """A computation: float32 inputs (name -> (shape, distribution)), constants, nodes
    (op, inputs, outputs, attributes). Its outputs are those of the last node, unless given.
    `expected` replaces ONNX Runtime where it lacks the op: a NumPy function of the inputs; with
    `onnx_reference`, onnx.reference.ReferenceEvaluator does, where the two disagree."""

    name: str
    nodes: list[tuple]
    inputs: dict[str, tuple[tuple[int, ...], str]] = field(default_factory=dict)
    consts: dict[str, np.ndarray] = field(default_factory=dict)
    outputs: list[str] | None = None
    expected: Callable[[dict[str, np.ndarray]], list[np.ndarray]] | None = None
    onnx_reference: bool = False  # ONNX's own reference implementation, where ONNX Runtime differs from it
    # Products each output element sums, where float32 rounding in a different order (FMA, vector
    # lanes) may differ by more than RTOL near cancellation: compared by tinsmith.tolerance's bound
    summed: int = 0

    def output_names(self) -> list[str]:
        return self.outputs or [o for o in self.nodes[-1][2] if o]


@dataclass
class Group:
    """Cases compiled together as one graph (value names prefixed by the case's name)."""

    name: str
    cases: list[Case]
    opset: int = 18


def n(op: str, inputs, outputs, **attrs) -> tuple:
    return (op, list(inputs), [outputs] if isinstance(outputs, str) else list(outputs), attrs)


def i64(*values) -> np.ndarray:
    return np.array(values, np.int64)


def f32(*values) -> np.ndarray:
    return np.array(values, np.float32)


def scalar(value: float) -> np.ndarray:
    return np.array(value, np.float32)


DISTRIBUTIONS = {
    "normal": lambda rng, s: rng.standard_normal(s),
    "wide": lambda rng, s: 4 * rng.standard_normal(s),
    "positive": lambda rng, s: rng.uniform(0.5, 2.0, s),
    "unit": lambda rng, s: rng.uniform(-0.95, 0.95, s),
    "above_one": lambda rng, s: rng.uniform(1.0, 4.0, s),
    "halves": lambda rng, s: np.round(rng.uniform(-6, 6, s)) / 2,  # ties for Round, zeros for 1/x
    "ints": lambda rng, s: np.round(rng.uniform(-3, 3, s)),  # equal values for comparisons and argmax
}


def make_inputs(group: Group) -> dict[str, np.ndarray]:
    """Seeded inputs of every case in the group, by prefixed name, in declaration order."""
    values = {}
    for case in group.cases:
        for name, (shape, kind) in case.inputs.items():
            rng = np.random.default_rng(zlib.crc32(f"{group.name}.{case.name}.{name}".encode()))
            values[f"{case.name}_{name}"] = DISTRIBUTIONS[kind](rng, shape).astype(np.float32)
    return values


def _renamed(case: Case, value: str) -> str:
    return f"{case.name}_{value}" if value else ""


def group_yaml(group: Group) -> str:
    """The group as Tinsmith graph YAML."""
    doc = {"graph": group.name,
           "inputs": {_renamed(c, k): {"dtype": "float32", "shape": list(shape)}
                      for c in group.cases for k, (shape, _) in c.inputs.items()},
           "outputs": [_renamed(c, o) for c in group.cases for o in c.output_names()]}
    constants = {}
    for c in group.cases:
        for k, v in c.consts.items():
            constants[_renamed(c, k)] = {"value": v.tolist(), "dtype": v.dtype.name}
    if constants:
        doc["constants"] = constants
    doc["nodes"] = [{"op": op, "name": _renamed(c, outs[0]), "inputs": [_renamed(c, v) for v in ins],
                     "outputs": [_renamed(c, v) for v in outs], **({"attrs": attrs} if attrs else {})}
                    for c in group.cases for op, ins, outs, attrs in c.nodes]
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=None)


def case_model(case: Case, opset: int) -> onnx.ModelProto:
    """One case as an ONNX model (constants as initializers)."""
    nodes = [helper.make_node(op, ins, outs, **attrs) for op, ins, outs, attrs in case.nodes]
    graph = helper.make_graph(
        nodes, case.name,
        [helper.make_tensor_value_info(k, FLOAT, list(shape)) for k, (shape, _) in case.inputs.items()],
        [helper.make_empty_tensor_value_info(o) for o in case.output_names()],
        initializer=[numpy_helper.from_array(v, k) for k, v in case.consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def expected_outputs(group: Group, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per prefixed output name, what ONNX Runtime (or the case's NumPy oracle, rounded to float32)
    computes."""
    result = {}
    for case in group.cases:
        feeds = {k: inputs[_renamed(case, k)] for k in case.inputs}
        if case.expected is not None:
            values = [np.asarray(v) for v in case.expected({k: v.astype(np.float64) for k, v in feeds.items()})]
            values = [v.astype(np.float32) if v.dtype == np.float64 else v for v in values]
        elif case.onnx_reference:
            values = ReferenceEvaluator(case_model(case, group.opset)).run(case.output_names(), feeds)
        else:
            try:
                session = onnxruntime.InferenceSession(case_model(case, group.opset).SerializeToString(),
                                                       providers=["CPUExecutionProvider"])
                values = session.run(case.output_names(), feeds)
            except Exception as e:  # noqa: BLE001  (fails this case's tests only)
                values = [e] * len(case.output_names())
        for name, value in zip(case.output_names(), values):
            if isinstance(value, Exception):
                result[_renamed(case, name)] = value
                continue
            result[_renamed(case, name)] = np.asarray(value)
    return result


# --- the cases ---------------------------------------------------------------------------------
X = (3, 4, 5)


def unary(op: str, kind: str = "normal", shape=X, **attrs) -> Case:
    name = op.lower() + "".join(f"_{k}{str(v).replace('.', 'p').replace('-', 'm')}" for k, v in attrs.items())
    return Case(name, [n(op, ["x"], "y", **attrs)], {"x": (shape, kind)})


def _swish(i, alpha=1.0):
    x = i["x"]
    return [x / (1 + np.exp(-alpha * x))]


GROUPS = [
    Group("mo_math", [
        unary("Abs"), unary("Neg"), unary("Reciprocal", "positive"), unary("Floor", "wide"),
        unary("Ceil", "wide"), unary("Round", "halves"), unary("Log", "positive"), unary("Sign", "ints"),
        unary("Sin", "wide"), unary("Cos", "wide"), unary("Tan", "unit"), unary("Asin", "unit"),
        unary("Acos", "unit"), unary("Atan", "wide"), unary("Sinh"), unary("Cosh"), unary("Asinh", "wide"),
        unary("Acosh", "above_one"), unary("Atanh", "unit"),
        Case("isnan", [n("Sqrt", ["x"], "r"), n("IsNaN", ["r"], "y")], {"x": (X, "normal")}),
        Case("isinf", [n("Reciprocal", ["x"], "r"), n("IsInf", ["r"], "y")], {"x": (X, "halves")}),
        Case("isinf_pos", [n("Reciprocal", ["x"], "r"), n("IsInf", ["r"], "y", detect_negative=0)],
             {"x": (X, "halves")}),
        Case("isinf_neg", [n("Reciprocal", ["x"], "r"), n("IsInf", ["r"], "y", detect_positive=0)],
             {"x": (X, "halves")}),
    ]),
    Group("mo_activations", [
        unary("LeakyRelu", "wide"), unary("LeakyRelu", "wide", alpha=0.1), unary("Elu", "wide"),
        unary("Elu", "wide", alpha=2.0), unary("Selu", "wide"), unary("Selu", "wide", alpha=2.0, gamma=3.0),
        unary("Celu", "wide", alpha=2.0), unary("Celu", "wide"), unary("HardSigmoid", "wide"),
        unary("HardSigmoid", "wide", alpha=0.5, beta=0.6), unary("HardSwish", "wide"),
        unary("Softplus", "wide"), unary("Softsign", "wide"), unary("Mish", "wide"),
        unary("ThresholdedRelu", "wide"), unary("ThresholdedRelu", "wide", alpha=2.0),
        unary("Shrink", "wide", lambd=1.5), unary("Shrink", "wide", bias=1.5, lambd=1.5),
        Case("swish", [n("Swish", ["x"], "y")], {"x": (X, "wide")}, expected=_swish),
        Case("prelu", [n("PRelu", ["x", "s"], "y")], {"x": (X, "normal"), "s": (X, "normal")}),
        Case("prelu_broadcast", [n("PRelu", ["x", "s"], "y")], {"x": (X, "normal")},
             {"s": f32(-0.7, -0.4, 0.2, 1.5, 0.1)}),
        Case("prelu_channel", [n("PRelu", ["x", "s"], "y")],
             {"x": ((2, 3, 2, 2), "normal"), "s": ((3, 1, 1), "normal")}),
        Case("clip", [n("Clip", ["x", "lo", "hi"], "y")], {"x": (X, "wide")},
             {"lo": scalar(-1.0), "hi": scalar(1.0)}),
        Case("clip_min", [n("Clip", ["x", "lo"], "y")], {"x": (X, "wide")}, {"lo": scalar(0.0)}),
        Case("clip_max", [n("Clip", ["x", "", "hi"], "y")], {"x": (X, "wide")}, {"hi": scalar(0.0)}),
        Case("clip_none", [n("Clip", ["x"], "y")], {"x": (X, "wide")}),
        Case("clip_crossed", [n("Clip", ["x", "lo", "hi"], "y")], {"x": (X, "wide")},
             {"lo": scalar(2.0), "hi": scalar(1.0)}),
        Case("clip_runtime", [n("Clip", ["x", "lo", "hi"], "y")], {"x": (X, "wide"), "lo": ((), "normal"),
                                                                    "hi": ((), "positive")}),
        Case("clip_int", [n("Cast", ["x"], "xi", to=INT64), n("Clip", ["xi", "lo", "hi"], "y")],
             {"x": (X, "wide")}, {"lo": np.array(-2, np.int64), "hi": np.array(3, np.int64)}),
    ]),
    Group("mo_binary", [
        Case("mod_fmod", [n("Mod", ["x", "y"], "z", fmod=1)], {"x": (X, "wide"), "y": ((5,), "positive")}),
        # ONNX Runtime only has fmod=1 for floats
        Case("mod_float", [n("Mod", ["x", "y"], "z", fmod=0)], {"x": (X, "wide"), "y": (X, "normal")},
             expected=lambda i: [np.mod(i["x"], i["y"])]),
        Case("mod_int", [n("Cast", ["x"], "xi", to=INT64), n("Cast", ["y"], "yi", to=INT64),
                         n("Mod", ["xi", "yi"], "z")], {"x": (X, "wide")}, {"y": f32(2, -3, 3, -2, 5)}),
        Case("mod_int_fmod", [n("Cast", ["x"], "xi", to=INT64), n("Mod", ["xi", "yi"], "z", fmod=1)],
             {"x": (X, "wide")}, {"yi": i64(2, -3, 3, -2, 5)}),
        Case("div_int", [n("Cast", ["x"], "xi", to=INT64), n("Div", ["xi", "yi"], "z")], {"x": (X, "wide")},
             {"yi": i64(2, -3, 3, -2, 5)}),
        Case("mul_int", [n("Cast", ["x"], "xi", to=INT64), n("Mul", ["xi", "yi"], "m"),
                         n("Sub", ["m", "xi"], "z")],
             {"x": (X, "wide")}, {"yi": i64(2, -3, 3, -2, 5)}),
        Case("pow_int_exponent", [n("Pow", ["x", "e"], "z")], {"x": (X, "normal")}, {"e": i64(3)}),
        Case("max1", [n("Max", ["a"], "z")], {"a": (X, "normal")}),
        Case("max3", [n("Max", ["a", "b", "c"], "z")], {"a": (X, "normal"), "b": ((5,), "normal"),
                                                        "c": ((4, 1), "normal")}),
        Case("min2", [n("Min", ["a", "b"], "z")], {"a": (X, "normal"), "b": ((4, 5), "normal")}),
        Case("min_int", [n("Cast", ["a"], "ai", to=INT64), n("Min", ["ai", "b"], "z")], {"a": (X, "wide")},
             {"b": i64(1, -1, 0, 2, -3)}),
        Case("max_int", [n("Cast", ["a"], "ai", to=INT64), n("Max", ["ai", "b"], "z")], {"a": (X, "wide")},
             {"b": i64(1, -1, 0, 2, -3)}),
        Case("sum3", [n("Sum", ["a", "b", "c"], "z")], {"a": (X, "normal"), "b": ((5,), "normal"),
                                                        "c": ((3, 1, 1), "normal")}),
        Case("sum1", [n("Sum", ["a"], "z")], {"a": (X, "normal")}),
        Case("mean3", [n("Mean", ["a", "b", "c"], "z")], {"a": (X, "normal"), "b": (X, "normal"),
                                                          "c": ((5,), "normal")}),
    ]),
    Group("mo_logic", [
        *[Case(f"{op.lower()}", [n(op, ["a", "b"], "z")], {"a": (X, "ints"), "b": ((5,), "ints")})
          for op in ("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual")],
        *[Case(f"{op.lower()}_int", [n("Cast", ["a"], "ai", to=INT64), n("Cast", ["b"], "bi", to=INT64),
                                      n(op, ["ai", "bi"], "z")], {"a": (X, "ints"), "b": (X, "ints")})
          for op in ("Equal", "Less", "GreaterOrEqual")],
        *[Case(f"{op.lower()}", [n("Greater", ["a", "zero"], "p"), n("Greater", ["b", "zero"], "q"),
                                  n(op, ["p", "q"], "z")],
               {"a": ((3, 4, 5, 2), "normal"), "b": ((4, 1, 2), "normal")},
               {"zero": scalar(0)}) for op in ("And", "Or", "Xor")],
        Case("equal_bool", [n("Greater", ["a", "zero"], "p"), n("Greater", ["b", "zero"], "q"),
                            n("Equal", ["p", "q"], "z")], {"a": (X, "normal"), "b": (X, "normal")},
             {"zero": scalar(0)}),
        Case("not", [n("Greater", ["a", "zero"], "p"), n("Not", ["p"], "z")], {"a": (X, "normal")},
             {"zero": scalar(0)}),
        Case("where", [n("Greater", ["c", "zero"], "p"), n("Where", ["p", "a", "b"], "z")],
             {"c": (X, "normal"), "a": (X, "normal"), "b": ((5,), "normal")}, {"zero": scalar(0)}),
        Case("where_int", [n("Greater", ["c", "zero"], "p"), n("Cast", ["a"], "ai", to=INT64),
                           n("Where", ["p", "ai", "b"], "z")], {"c": ((4, 5), "normal"), "a": (X, "wide")},
             {"zero": scalar(0), "b": i64(-7)}),
        Case("cast_to_int", [n("Cast", ["a"], "z", to=INT64)], {"a": (X, "wide")}),
        Case("cast_to_bool", [n("Cast", ["a"], "z", to=BOOL)], {"a": (X, "ints")}),
        Case("cast_bool_to_float", [n("Greater", ["a", "zero"], "p"), n("Cast", ["p"], "z", to=FLOAT)],
             {"a": (X, "normal")}, {"zero": scalar(0)}),
        Case("cast_int_to_float", [n("Cast", ["a"], "ai", to=INT64), n("Cast", ["ai"], "z", to=FLOAT)],
             {"a": (X, "wide")}),
        Case("cast_int_to_bool", [n("Cast", ["a"], "ai", to=INT64), n("Cast", ["ai"], "z", to=BOOL)],
             {"a": (X, "ints")}),
        Case("cast_same", [n("Cast", ["a"], "z", to=FLOAT)], {"a": (X, "normal")}),
        Case("castlike", [n("CastLike", ["a", "like"], "z")], {"a": (X, "wide")}, {"like": i64(0)}),
    ]),
    Group("mo_layout", [
        *[Case(f"flatten_{a if a >= 0 else 'm' + str(-a)}", [n("Flatten", ["x"], "y", axis=a)],
               {"x": ((2, 3, 4, 5), "normal")}) for a in (0, 1, 2, 3, 4, -1, -3)],
        Case("flatten_default", [n("Flatten", ["x"], "y")], {"x": ((5, 4, 3, 2), "normal")}),
        Case("squeeze", [n("Squeeze", ["x", "axes"], "y")], {"x": ((1, 3, 4, 5), "normal")}, {"axes": i64(0)}),
        Case("squeeze_neg", [n("Squeeze", ["x", "axes"], "y")], {"x": ((1, 3, 1, 5), "normal")},
             {"axes": i64(-2)}),
        Case("squeeze_all", [n("Squeeze", ["x"], "y")], {"x": ((1, 3, 1, 5), "normal")}),
        Case("unsqueeze", [n("Unsqueeze", ["x", "axes"], "y")], {"x": (X, "normal")}, {"axes": i64(1, 4)}),
        Case("unsqueeze_unsorted", [n("Unsqueeze", ["x", "axes"], "y")], {"x": (X, "normal")},
             {"axes": i64(5, 4, 2)}),
        Case("unsqueeze_neg", [n("Unsqueeze", ["x", "axes"], "y")], {"x": ((1, 3, 1, 5), "normal")},
             {"axes": i64(-2)}),
        Case("expand_changed", [n("Expand", ["x", "s"], "y")], {"x": ((3, 1), "normal")}, {"s": i64(2, 1, 6)}),
        Case("expand_same_rank", [n("Expand", ["x", "s"], "y")], {"x": ((3, 1), "normal")}, {"s": i64(3, 4)}),
        Case("expand_int", [n("Cast", ["x"], "xi", to=INT64), n("Expand", ["xi", "s"], "y")],
             {"x": ((1, 4), "wide")}, {"s": i64(3, 1)}),
        Case("tile", [n("Tile", ["x", "r"], "y")], {"x": ((2, 3, 4), "normal")}, {"r": i64(2, 1, 3)}),
        Case("tile_2d", [n("Tile", ["x", "r"], "y")], {"x": ((2, 2), "normal")}, {"r": i64(2, 2)}),
        Case("depth_to_space_dcr", [n("DepthToSpace", ["x"], "y", blocksize=2, mode="DCR")],
             {"x": ((1, 8, 2, 3), "normal")}),
        Case("depth_to_space_crd", [n("DepthToSpace", ["x"], "y", blocksize=2, mode="CRD")],
             {"x": ((2, 8, 2, 3), "normal")}),
        Case("depth_to_space_default", [n("DepthToSpace", ["x"], "y", blocksize=3)],
             {"x": ((1, 9, 2, 2), "normal")}),
        Case("space_to_depth", [n("SpaceToDepth", ["x"], "y", blocksize=2)], {"x": ((2, 2, 6, 6), "normal")}),
        Case("space_to_depth_3", [n("SpaceToDepth", ["x"], "y", blocksize=3)], {"x": ((1, 2, 3, 6), "normal")}),
        Case("identity_int", [n("Cast", ["x"], "xi", to=INT64), n("Identity", ["xi"], "y")], {"x": (X, "wide")}),
        Case("identity_bool", [n("Greater", ["x", "zero"], "p"), n("Identity", ["p"], "y")], {"x": (X, "normal")},
             {"zero": scalar(0)}),
        Case("dropout", [n("Dropout", ["x"], "y")], {"x": (X, "normal")}),
        Case("dropout_mask", [n("Dropout", ["x", "r"], ["y", "mask"])], {"x": (X, "normal")},
             {"r": scalar(0.1)}),
        Case("dropout_not_training", [n("Dropout", ["x", "r", "t"], ["y", "mask"])], {"x": (X, "normal")},
             {"r": scalar(0.5), "t": scalar(0)},
             expected=lambda i: [i["x"], np.ones(X, np.bool_)]),
    ]),
    Group("mo_indexing", [
        Case("slice", [n("Slice", ["x", "s", "e", "a", "st"], "y")], {"x": ((20, 10, 5), "normal")},
             {"s": i64(0, 0), "e": i64(3, 10), "a": i64(0, 1), "st": i64(1, 1)}),
        Case("slice_neg", [n("Slice", ["x", "s", "e", "a", "st"], "y")], {"x": ((20, 10, 5), "normal")},
             {"s": i64(0), "e": i64(-1), "a": i64(1), "st": i64(1)}),
        Case("slice_end_out_of_bounds", [n("Slice", ["x", "s", "e", "a", "st"], "y")],
             {"x": ((20, 10, 5), "normal")}, {"s": i64(1), "e": i64(1000), "a": i64(1), "st": i64(1)}),
        Case("slice_default_axes", [n("Slice", ["x", "s", "e"], "y")], {"x": ((20, 10, 5), "normal")},
             {"s": i64(0, 0, 3), "e": i64(20, 10, 4)}),
        Case("slice_neg_steps", [n("Slice", ["x", "s", "e", "a", "st"], "y")], {"x": ((20, 10, 5), "normal")},
             {"s": i64(20, 10, 4), "e": i64(0, 0, 1), "a": i64(0, 1, 2), "st": i64(-1, -3, -2)}),
        Case("slice_negative_axes", [n("Slice", ["x", "s", "e", "a"], "y")], {"x": ((20, 10, 5), "normal")},
             {"s": i64(0, 0, 3), "e": i64(20, 10, 4), "a": i64(0, -2, -1)}),
        Case("slice_reverse_all", [n("Slice", ["x", "s", "e", "a", "st"], "y")], {"x": ((4, 6), "normal")},
             {"s": i64(-1, 5), "e": i64(-(2 ** 40), -100), "a": i64(0, 1), "st": i64(-1, -2)}),
        Case("slice_steps", [n("Slice", ["x", "s", "e", "a", "st"], "y")], {"x": ((7, 9), "normal")},
             {"s": i64(1, -8), "e": i64(2 ** 40, 9), "a": i64(0, 1), "st": i64(2, 3)}),
        *[Case(f"gather_{axis}", [n("Gather", ["x", "i"], "y", axis=axis)], {"x": ((5, 4, 3, 2), "normal")},
               {"i": i64(0, 1, 3)}) for axis in (0, 1)],
        Case("gather_2d_indices", [n("Gather", ["x", "i"], "y", axis=1)], {"x": ((3, 3), "normal")},
             {"i": np.array([[0, 2]], np.int64)}),
        Case("gather_negative", [n("Gather", ["x", "i"], "y", axis=0)], {"x": ((10,), "normal")},
             {"i": i64(0, -9, -10)}),
        Case("gather_scalar", [n("Gather", ["x", "i"], "y", axis=-1)], {"x": ((3, 4), "normal")},
             {"i": np.array(-2, np.int64)}),
        Case("gather_runtime", [n("Cast", ["p"], "i", to=INT64), n("Gather", ["x", "i"], "y", axis=1)],
             {"x": ((3, 4, 2), "normal"), "p": ((2, 3), "ints")}),
        Case("gather_int_data", [n("Cast", ["x"], "xi", to=INT64), n("Gather", ["xi", "i"], "y", axis=0)],
             {"x": ((4, 3), "wide")}, {"i": i64(3, 0, 0)}),
        Case("gather_elements", [n("GatherElements", ["x", "i"], "y", axis=1)], {"x": ((2, 2), "normal")},
             {"i": np.array([[0, 0], [1, 0]], np.int64)}),
        Case("gather_elements_0", [n("GatherElements", ["x", "i"], "y", axis=0)], {"x": ((3, 3), "normal")},
             {"i": np.array([[1, 2, 0], [2, 0, 0]], np.int64)}),
        Case("gather_elements_neg", [n("GatherElements", ["x", "i"], "y", axis=0)], {"x": ((3, 3), "normal")},
             {"i": np.array([[-1, -2, 0], [-2, 0, 0]], np.int64)}),
        Case("pad_constant", [n("Pad", ["x", "p", "v"], "y", mode="constant")], {"x": ((1, 3, 4, 5), "normal")},
             {"p": i64(0, 0, 1, 3, 0, 0, 2, 4), "v": scalar(1.2)}),
        Case("pad_constant_axes", [n("Pad", ["x", "p", "v", "a"], "y", mode="constant")],
             {"x": ((1, 3, 4, 5), "normal")}, {"p": i64(0, 3, 0, 4), "v": scalar(1.2), "a": i64(1, 3)}),
        Case("pad_constant_neg_axes", [n("Pad", ["x", "p", "v", "a"], "y", mode="constant")],
             {"x": ((1, 3, 4, 5), "normal")}, {"p": i64(0, 3, 0, 4), "v": scalar(1.2), "a": i64(-3, -1)}),
        Case("pad_default_value", [n("Pad", ["x", "p"], "y")], {"x": ((3, 4), "normal")}, {"p": i64(1, 0, 2, 1)}),
        Case("pad_crop", [n("Pad", ["x", "p"], "y")], {"x": ((4, 5), "normal")}, {"p": i64(-1, 2, 1, -2)}),
        *[Case(f"pad_{mode}", [n("Pad", ["x", "p"], "y", mode=mode)], {"x": ((1, 3, 4, 5), "normal")},
               {"p": i64(0, 0, 1, 3, 0, 0, 3, 2)}) for mode in ("reflect", "edge", "wrap")],
        Case("trilu_upper", [n("Trilu", ["x"], "y")], {"x": ((4, 5), "normal")}),
        *[Case(f"trilu_{'upper' if up else 'lower'}_k{str(k).replace('-', 'm')}",
               [n("Trilu", ["x", "k"], "y", upper=up)], {"x": ((2, 4, 5), "normal")},
               {"k": np.array(k, np.int64)})
          for up in (0, 1) for k in (-1, 2, -7, 6)],
        Case("trilu_int", [n("Cast", ["x"], "xi", to=INT64), n("Trilu", ["xi"], "y", upper=0)],
             {"x": ((3, 1, 5), "wide")}),
        Case("topk", [n("TopK", ["x", "k"], ["v", "i"], axis=1)], {"x": ((3, 4), "normal")}, {"k": i64(3)}),
        Case("topk_smallest", [n("TopK", ["x", "k"], ["v", "i"], axis=1, largest=0, sorted=1)],
             {"x": ((3, 4), "normal")}, {"k": i64(3)}),
        Case("topk_ties", [n("TopK", ["x", "k"], ["v", "i"], axis=-1)], {"x": ((2, 3, 6), "ints")},
             {"k": i64(4)}),
        Case("topk_ties_smallest", [n("TopK", ["x", "k"], ["v", "i"], axis=0, largest=0)],
             {"x": ((5, 3), "ints")}, {"k": i64(5)}),
        Case("topk_int", [n("Cast", ["x"], "xi", to=INT64), n("TopK", ["xi", "k"], ["v", "i"], axis=0)],
             {"x": ((4, 3), "wide")}, {"k": i64(2)}),
        *[Case(f"onehot_{tag}", [n("OneHot", ["x", "depth", "values"], "y", **attrs)], {"x": ((2, 3), "ints")},
               {"depth": scalar(5), "values": f32(1, 3)})
          for tag, attrs in (("default", {}), ("axis1", {"axis": 1}), ("axis_m2", {"axis": -2}),
                             ("axis0", {"axis": 0}))],
        Case("onehot_int", [n("Cast", ["x"], "xi", to=INT64), n("OneHot", ["xi", "depth", "values"], "y")],
             {"x": ((4,), "wide")}, {"depth": i64(6), "values": i64(-1, 7)}),
        Case("gather_nd", [n("GatherND", ["x", "i"], "y")], {"x": ((2, 2, 2), "normal")},
             {"i": np.array([[[0, 1]], [[1, 0]]], np.int64)}),
        Case("gather_nd_elements", [n("GatherND", ["x", "i"], "y")], {"x": ((2, 3), "normal")},
             {"i": np.array([[0, 0], [1, -1]], np.int64)}),
        Case("gather_nd_batch", [n("GatherND", ["x", "i"], "y", batch_dims=1)], {"x": ((2, 2, 2), "normal")},
             {"i": np.array([[1], [0]], np.int64)}),
        *[Case(f"scatter_elements_{tag}", [n("ScatterElements", ["x", "i", "u"], "y", **attrs)],
               {"x": ((3, 3), "normal"), "u": ((2, 3), "normal")}, {"i": np.array(idx, np.int64)})
          for tag, idx, attrs in (("default", [[1, 0, 2], [0, 2, 1]], {}),
                                  ("axis1", [[1, -1, 0], [2, 0, -3]], {"axis": 1}),
                                  *[(r, [[1, 1, 0], [1, 1, 0]], {"reduction": r})
                                    for r in ("add", "mul", "max", "min")])],
        *[Case(f"scatter_nd_{tag}", [n("ScatterND", ["x", "i", "u"], "y", **attrs)],
               {"x": ((4, 3, 2), "normal"), "u": ((2, 3, 2), "normal")}, {"i": np.array(idx, np.int64)})
          for tag, idx, attrs in (("default", [[0], [2]], {}), ("negative", [[-1], [1]], {}),
                                  *[(r, [[0], [0]], {"reduction": r}) for r in ("add", "mul", "max", "min")])],
        Case("scatter_nd_elements", [n("ScatterND", ["x", "i", "u"], "y", reduction="max")],
             {"x": ((2, 2), "normal"), "u": ((2,), "normal")}, {"i": np.array([[0, 0], [1, 1]], np.int64)}),
        # EyeLike reads only its input's type: the copy keeps the graph input in use
        *[Case(f"eyelike{tag}", [n("EyeLike", ["x"], "y", **attrs), n("Identity", ["x"], "copy")],
               {"x": (shape, "normal")}, outputs=["y", "copy"])
          for tag, shape, attrs in (("", (4, 4), {}), ("_k", (4, 5), {"k": 1}),
                                    ("_dtype", (5, 3), {"k": -2, "dtype": INT64}))],
    ]),
    Group("mo_reduce", [
        *[Case(f"{op.lower()[6:]}_{tag}", [n(op, ["x", "a"] if axes is not None else ["x"], "y", **attrs)],
               {"x": ((3, 2, 4), "positive" if op in ("ReduceLogSum", "ReduceProd") else "normal")},
               {"a": i64(*axes)} if axes is not None else {})
          for op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                     "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp")
          for tag, axes, attrs in (("keep", (1,), {"keepdims": 1}), ("drop", (2,), {"keepdims": 0}),
                                   ("neg", (-2, 0), {}), ("all", None, {"keepdims": 1}),
                                   ("all_drop", None, {"keepdims": 0}))],
        Case("sum_noop", [n("ReduceSum", ["x"], "y", noop_with_empty_axes=1)], {"x": ((3, 2, 2), "normal")}),
        Case("sum_int", [n("Cast", ["x"], "xi", to=INT64), n("ReduceSum", ["xi", "a"], "y", keepdims=0)],
             {"x": ((3, 4), "wide")}, {"a": i64(1)}),
        Case("max_int", [n("Cast", ["x"], "xi", to=INT64), n("ReduceMax", ["xi", "a"], "y")],
             {"x": ((3, 4), "wide")}, {"a": i64(0)}),
        Case("max_bool", [n("Greater", ["x", "zero"], "p"), n("ReduceMax", ["p", "a"], "y")],
             {"x": ((4, 2), "normal")}, {"a": i64(1), "zero": scalar(0)}),
        Case("min_bool", [n("Greater", ["x", "zero"], "p"), n("ReduceMin", ["p", "a"], "y", keepdims=0)],
             {"x": ((4, 2), "normal")}, {"a": i64(1), "zero": scalar(0)}),
        *[Case(f"{op.lower()}_{tag}", [n(op, ["x"], "y", **attrs)], {"x": ((2, 3, 4), "ints")})
          for op in ("ArgMax", "ArgMin")
          for tag, attrs in (("default", {}), ("axis1_drop", {"axis": 1, "keepdims": 0}),
                             ("neg_axis", {"axis": -1}), ("last", {"axis": 1, "select_last_index": 1}),
                             ("last_drop", {"axis": 2, "keepdims": 0, "select_last_index": 1}))],
        Case("argmax_int", [n("Cast", ["x"], "xi", to=INT64), n("ArgMax", ["xi"], "y", axis=1)],
             {"x": ((3, 4), "wide")}),
        *[Case(f"cumsum_{tag}", [n("CumSum", ["x", "a"], "y", **attrs)], {"x": ((2, 3, 4), "normal")},
               {"a": np.array(axis, np.int64)})
          for tag, axis, attrs in (("0", 0, {}), ("1", 1, {}), ("neg", -1, {}),
                                   ("exclusive", 2, {"exclusive": 1}), ("reverse", 1, {"reverse": 1}),
                                   ("reverse_exclusive", 2, {"reverse": 1, "exclusive": 1}))],
        Case("cumsum_int", [n("Cast", ["x"], "xi", to=INT64), n("CumSum", ["xi", "a"], "y", exclusive=1)],
             {"x": ((2, 5), "wide")}, {"a": np.array(1, np.int64)}),
        *[Case(f"{op.lower()}_{str(axis).replace('-', 'm')}", [n(op, ["x"], "y", axis=axis)],
               {"x": ((3, 4, 5), kind)})
          for op, kind in (("LogSoftmax", "wide"), ("Softmax", "wide"), ("Hardmax", "ints"))
          for axis in (0, 1, 2, -1)],
        Case("logsoftmax_large", [n("Add", ["x", "big"], "s"), n("LogSoftmax", ["s"], "y")],
             {"x": ((2, 4), "normal")}, {"big": f32(0, 10000)[:, None] * np.ones((2, 4), np.float32)}),
        Case("hardmax_default", [n("Hardmax", ["x"], "y")], {"x": ((3, 4), "ints")}),
    ], opset=20),  # ReduceMax and ReduceMin of bool data
    Group("mo_resize", [
        *[Case(f"resize_{tag}", [n("Resize", ["x", "", "s"], "y", **attrs)], {"x": (shape, "normal")},
               {"s": f32(*scales)}, summed=16 if attrs["mode"] == "cubic" else 0)
          for tag, shape, scales, attrs in (
              ("up_nearest", (1, 1, 2, 2), (1, 1, 2, 3), {"mode": "nearest"}),
              ("down_nearest", (1, 1, 2, 4), (1, 1, 0.6, 0.6), {"mode": "nearest"}),
              ("up_linear", (1, 1, 2, 2), (1, 1, 2, 2), {"mode": "linear"}),
              ("up_linear_align", (1, 1, 2, 2), (1, 1, 2, 2),
               {"mode": "linear", "coordinate_transformation_mode": "align_corners"}),
              ("down_linear", (1, 1, 2, 4), (1, 1, 0.6, 0.6), {"mode": "linear"}),
              ("up_linear_asymmetric", (1, 2, 3, 3), (1, 1, 2.5, 1.5),
               {"mode": "linear", "coordinate_transformation_mode": "asymmetric"}),
              ("linear_symmetric_down", (1, 1, 1, 4), (1, 1, 1, 0.6),
               {"mode": "linear", "coordinate_transformation_mode": "half_pixel_symmetric"}),
              ("linear_symmetric_up", (1, 1, 2, 2), (1, 1, 2.3, 2.94),
               {"mode": "linear", "coordinate_transformation_mode": "half_pixel_symmetric"}),
              ("up_cubic", (1, 1, 4, 4), (1, 1, 2, 2), {"mode": "cubic"}),
              ("up_cubic_align", (1, 1, 4, 4), (1, 1, 2, 2),
               {"mode": "cubic", "coordinate_transformation_mode": "align_corners"}),
              ("down_cubic", (1, 1, 4, 4), (1, 1, 0.8, 0.8), {"mode": "cubic"}),
              ("up_cubic_exclude", (1, 1, 4, 4), (1, 1, 2, 2),
               {"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1}),
              ("down_cubic_exclude", (1, 1, 4, 4), (1, 1, 0.8, 0.8),
               {"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1}),
              ("up_cubic_asymmetric", (1, 1, 4, 4), (1, 1, 2, 2),
               {"mode": "cubic", "coordinate_transformation_mode": "asymmetric"}),
              ("nearest_axes", (1, 1, 2, 2), (2, 3), {"mode": "nearest", "axes": [2, 3]}),
              ("nearest_axes_swapped", (1, 1, 2, 2), (3, 2), {"mode": "nearest", "axes": [3, 2]}),
          )],
        # align_corners divides by (output length - 1): ONNX's reference (and conformance test) takes the
        # length as scale * input size (2.4 here), ONNX Runtime the rounded size (2).
        Case("resize_down_linear_align", [n("Resize", ["x", "", "s"], "y", mode="linear",
                                            coordinate_transformation_mode="align_corners")],
             {"x": ((1, 1, 2, 4), "normal")}, {"s": f32(1, 1, 0.6, 0.6)}, onnx_reference=True),
        *[Case(f"resize_sizes_{tag}", [n("Resize", ["x", "", "", "s"], "y", **attrs)], {"x": (shape, "normal")},
               {"s": i64(*sizes)}, summed=16 if attrs["mode"] == "cubic" else 0)
          for tag, shape, sizes, attrs in (
              ("up_nearest", (1, 1, 2, 2), (1, 1, 7, 8), {"mode": "nearest"}),
              ("down_nearest", (1, 1, 2, 4), (1, 1, 1, 3), {"mode": "nearest"}),
              ("floor_align", (1, 1, 4, 4), (1, 1, 8, 8),
               {"mode": "nearest", "coordinate_transformation_mode": "align_corners", "nearest_mode": "floor"}),
              ("prefer_ceil_asymmetric", (1, 1, 4, 4), (1, 1, 8, 8),
               {"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                "nearest_mode": "round_prefer_ceil"}),
              ("ceil_half_pixel", (1, 1, 4, 4), (1, 1, 8, 8),
               {"mode": "nearest", "coordinate_transformation_mode": "half_pixel", "nearest_mode": "ceil"}),
              ("linear_pytorch", (1, 1, 4, 4), (1, 1, 3, 1),
               {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}),
              ("up_cubic", (1, 1, 4, 4), (1, 1, 9, 10), {"mode": "cubic"}),
              ("down_cubic", (1, 1, 4, 4), (1, 1, 3, 3), {"mode": "cubic"}),
              ("not_larger", (1, 1, 2, 2), (7, 8),
               {"mode": "nearest", "axes": [2, 3], "keep_aspect_ratio_policy": "not_larger"}),
              ("not_smaller", (1, 1, 2, 4), (1, 3),
               {"mode": "nearest", "axes": [2, 3], "keep_aspect_ratio_policy": "not_smaller"}),
              ("linear_nhwc", (1, 5, 6, 3), (1, 8, 4, 3), {"mode": "linear"}),
          )],
        Case("resize_crop", [n("Resize", ["x", "roi", "", "s"], "y", mode="linear",
                               coordinate_transformation_mode="tf_crop_and_resize")],
             {"x": ((1, 1, 4, 4), "normal")},
             {"roi": f32(0, 0, 0.4, 0.6, 1, 1, 0.6, 0.8), "s": i64(1, 1, 3, 3)}),
        Case("resize_crop_extrapolate", [n("Resize", ["x", "roi", "", "s"], "y", mode="linear",
                                           coordinate_transformation_mode="tf_crop_and_resize",
                                           extrapolation_value=10.0)], {"x": ((1, 1, 4, 4), "normal")},
             {"roi": f32(0, 0, 0.4, 0.6, 1, 1, 1.2, 1.7), "s": i64(1, 1, 3, 3)}),
        Case("resize_crop_axes", [n("Resize", ["x", "roi", "", "s"], "y", mode="linear", axes=[3, 2],
                                    coordinate_transformation_mode="tf_crop_and_resize")],
             {"x": ((1, 1, 4, 4), "normal")}, {"roi": f32(0.6, 0.4, 0.8, 0.6), "s": i64(3, 3)}),
    ], opset=19),
    # Before opset 13 (Reduce*, Squeeze, Unsqueeze, Split) or 11 (Clip), these took attributes.
    Group("mo_legacy", [
        Case("clip_attrs", [n("Clip", ["x"], "y", min=-0.5, max=0.7)], {"x": (X, "normal")}),
        Case("clip_attr_min", [n("Clip", ["x"], "y", min=0.1)], {"x": (X, "normal")}),
        Case("reduce_sum_attr", [n("ReduceSum", ["x"], "y", axes=[0, 2], keepdims=0)], {"x": (X, "normal")}),
        Case("reduce_max_attr", [n("ReduceMax", ["x"], "y", axes=[-1])], {"x": (X, "normal")}),
        Case("reduce_l2_attr", [n("ReduceL2", ["x"], "y", axes=[1])], {"x": (X, "normal")}),
        Case("squeeze_attr", [n("Squeeze", ["x"], "y", axes=[0, 2])], {"x": ((1, 3, 1, 5), "normal")}),
        Case("unsqueeze_attr", [n("Unsqueeze", ["x"], "y", axes=[0, 3])], {"x": ((3, 5), "normal")}),
        Case("dropout_ratio", [n("Dropout", ["x"], "y", ratio=0.2)], {"x": (X, "normal")}),
        Case("split_attr", [n("Split", ["x"], ["a", "b"], axis=1, split=[2, 4])], {"x": ((2, 6), "normal")}),
    ], opset=10),
    Group("mo_split", [
        Case("split_equal", [n("Split", ["x"], ["a", "b", "c"], axis=0, num_outputs=3)], {"x": ((6,), "normal")}),
        Case("split_2d", [n("Split", ["x"], ["a", "b"], axis=1, num_outputs=2)], {"x": ((2, 6), "normal")}),
        Case("split_sizes", [n("Split", ["x", "s"], ["a", "b"], axis=1)], {"x": ((2, 6), "normal")},
             {"s": i64(2, 4)}),
        Case("split_uneven", [n("Split", ["x"], ["a", "b", "c", "d"], num_outputs=4)], {"x": ((7,), "normal")}),
        Case("split_uneven_2d", [n("Split", ["x"], ["a", "b", "c"], axis=1, num_outputs=3)],
             {"x": ((2, 8), "normal")}),
    ]),
    Group("mo_opset11", [
        Case("resize_tf_half_pixel_for_nn", [n("Resize", ["x", "roi", "s"], "y", mode="nearest",
                                               coordinate_transformation_mode="tf_half_pixel_for_nn")],
             {"x": ((1, 2, 3, 4), "normal")}, {"roi": f32(0, 0, 0, 0, 1, 1, 1, 1), "s": f32(1, 1, 1.7, 0.6)}),
    ], opset=11),
]

CASES = [(g.name, c.name) for g in GROUPS for c in g.cases]
IDS = [f"{g}.{c}" for g, c in CASES]


# --- running them ------------------------------------------------------------------------------
@dataclass
class Results:
    expected: dict[str, dict[str, np.ndarray]]  # group -> prefixed output -> value
    got: dict[str, dict[str, np.ndarray]]  # group -> prefixed output -> compiled (or reference) value
    log: str


def _compare(group: Group, case: Case, results: Results) -> None:
    if group.name not in results.got:
        pytest.fail(f"{group.name} did not build:\n{results.log[-6000:]}")
    for out in case.output_names():
        name = _renamed(case, out)
        want, got = results.expected[group.name][name], results.got[group.name][name]
        if isinstance(want, Exception):
            pytest.fail(f"ONNX Runtime cannot run case {case.name}: {want}")
        assert got.shape == want.shape, f"{out}: shape {got.shape}, expected {want.shape}"
        assert got.dtype == want.dtype, f"{out}: dtype {got.dtype}, expected {want.dtype}"
        if want.dtype == np.float32 and case.summed:  # a cubic resize's 4 x 4 taps
            ok, ratio = within_tolerance(got, want, case.summed, RTOL, ATOL)
            assert ok, f"{out}: {ratio:.2f} times the tolerance of {case.summed} summed float32 products"
        elif want.dtype == np.float32:
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=out)
        else:
            np.testing.assert_array_equal(got, want, err_msg=out)


def _find(group_name: str, case_name: str) -> tuple[Group, Case]:
    group = next(g for g in GROUPS if g.name == group_name)
    return group, next(c for c in group.cases if c.name == case_name)


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, tuple]:
    """Every group's YAML file, inputs and ONNX Runtime's outputs."""
    folder = tmp_path_factory.mktemp("more_ops_graphs")
    result = {}
    for group in GROUPS:
        path = folder / f"{group.name}.yaml"
        path.write_text(group_yaml(group))
        inputs = make_inputs(group)
        result[group.name] = (path, inputs, expected_outputs(group, inputs))
    return result


@pytest.fixture(scope="module")
def compiled(sources, tmp_path_factory, scons_cmd, runner_io) -> Results:
    """All groups built by one SCons run (-k: a broken group fails only its own cases), each runner run once.
    Built for the one-level host: the operators are the question here, not the dispatching build's
    levels (tests/test_host_levels.py)."""
    build = tmp_path_factory.mktemp("more_ops_build")
    paths = ",".join(str(path) for path, _, _ in sources.values())
    proc = scons_cmd("-Q", "-k", "-j2", "target=host", f"graphs={paths}", f"build_dir={build}", check=False)
    got, expected = {}, {}
    for name, (path, inputs, want) in sources.items():
        expected[name] = want
        runner = build / name / f"{name}_runner"
        if runner.exists():
            graph = lower(path)
            types = [graph.types[o] for o in graph.outputs]
            layout = [(t.shape, t.numpy_dtype) for t in types]
            values = runner_io(runner, list(inputs.values()), layout, path.parent)
            got[name] = dict(zip(graph.outputs, values))
    return Results(expected, got, proc.stdout + proc.stderr)


@pytest.fixture(scope="module")
def referenced(sources) -> Results:
    """All groups evaluated with the primitives' NumPy references (tinsmith.reference)."""
    got, expected, log = {}, {}, ""
    for name, (path, inputs, want) in sources.items():
        expected[name] = want
        try:
            got[name] = evaluate(lower(path), inputs)
        except Exception as e:  # noqa: BLE001  (reported by each case of the group)
            log += f"{name}: {type(e).__name__}: {e}\n"
    return Results(expected, got, log)


@pytest.mark.parametrize("group_name, case_name", CASES, ids=IDS)
def test_compiled_matches_onnxruntime(compiled, group_name, case_name):
    group, case = _find(group_name, case_name)
    _compare(group, case, compiled)


@pytest.mark.parametrize("group_name, case_name", CASES, ids=IDS)
def test_reference_matches_onnxruntime(referenced, group_name, case_name):
    group, case = _find(group_name, case_name)
    _compare(group, case, referenced)


# --- inference and references against NumPy written here ---------------------------------------
def t(*shape: int, dtype: str = "float32") -> TensorType:
    return TensorType(dtype, tuple(shape))


def infer(op: str, types, attrs=None, values=None) -> list[TensorType]:
    prim = PRIMITIVES[op]
    checked = check_attrs(prim.attrs, attrs or {}, f"{op} node 'n'")
    values = tuple(values) if values is not None else (None,) * len(types)
    return list(prim.infer(InferArgs(tuple(types), checked, values)))


def reference(op: str, xs, attrs=None) -> list[np.ndarray]:
    prim = PRIMITIVES[op]
    return list(prim.reference(list(xs), check_attrs(prim.attrs, attrs or {}, f"{op} node 'n'")))


def infer_error(op: str, types, attrs=None, values=None) -> str:
    with pytest.raises(OpError) as info:
        infer(op, types, attrs, values)
    return str(info.value)


def test_round_is_half_to_even():
    x = f32(0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.4, 0.6)
    (y,) = reference("Round", [x])
    assert y.tolist() == [0.0, 2.0, 2.0, -0.0, -2.0, -2.0, 0.0, 1.0]


def test_mod_signs():
    a, b = f32(-4.3, 7.2, 5.0, 4.3, -7.2, 8.0), f32(2.1, -3.4, 8.0, -2.1, 3.4, 5.0)
    (python_mod,) = reference("Mod", [a, b])
    (c_fmod,) = reference("Mod", [a, b], {"fmod": 1})
    wa, wb = a.astype(np.float64), b.astype(np.float64)
    np.testing.assert_allclose(python_mod, [x - y * math.floor(x / y) for x, y in zip(wa, wb)], rtol=1e-6)
    np.testing.assert_allclose(c_fmod, [math.fmod(x, y) for x, y in zip(wa, wb)], rtol=1e-6)
    (int_mod,) = reference("Mod", [i64(-4, 7, 5, 4, -7, 8), i64(2, -3, 8, -2, 3, 5)])
    assert int_mod.tolist() == [0, -2, 5, 0, 2, 3]
    (int_fmod,) = reference("Mod", [i64(-4, 7, 5, 4, -7, 8), i64(2, -3, 8, -2, 3, 5)], {"fmod": 1})
    assert int_fmod.tolist() == [0, 1, 5, 0, -1, 3]


def test_integer_division_truncates_like_cpp():
    (y,) = reference("Div", [i64(7, -7, 7, -7), i64(2, 2, -2, -2)])
    assert y.tolist() == [3, -3, -3, 3]


def test_activations_by_hand():
    x = f32(-2.0, -0.5, 0.0, 0.5, 2.0)
    expected = {
        ("LeakyRelu", ()): [-0.02, -0.005, 0.0, 0.5, 2.0],
        ("Elu", (("alpha", 2.0),)): [2 * (math.exp(-2) - 1), 2 * (math.exp(-0.5) - 1), 0.0, 0.5, 2.0],
        ("HardSigmoid", ()): [0.1, 0.4, 0.5, 0.6, 0.9],
        ("HardSwish", ()): [-2 * (1 / 6), -0.5 * (5 / 12), 0.0, 0.5 * (7 / 12), 2 * (5 / 6)],
        ("Softsign", ()): [-2 / 3, -1 / 3, 0.0, 1 / 3, 2 / 3],
        ("Softplus", ()): [math.log1p(math.exp(v)) for v in (-2.0, -0.5, 0.0, 0.5, 2.0)],
        ("ThresholdedRelu", (("alpha", 0.4),)): [0.0, 0.0, 0.0, 0.5, 2.0],
        ("Shrink", (("bias", 0.25), ("lambd", 0.6))): [-1.75, 0.0, 0.0, 0.0, 1.75],
        ("Celu", ()): [math.exp(-2) - 1, math.exp(-0.5) - 1, 0.0, 0.5, 2.0],
    }
    for (op, attrs), want in expected.items():
        (y,) = reference(op, [x], dict(attrs))
        np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-7, err_msg=op)


def test_comparisons_and_logic_give_bool():
    assert infer("Less", [t(2, 3), t(3)]) == [t(2, 3, dtype="bool")]
    assert infer("Equal", [t(2, dtype="int64"), t(2, dtype="int64")]) == [t(2, dtype="bool")]
    assert infer("And", [t(2, 1, dtype="bool"), t(3, dtype="bool")]) == [t(2, 3, dtype="bool")]
    assert infer("Where", [t(2, 1, dtype="bool"), t(3), t(1)]) == [t(2, 3)]
    assert infer_error("And", [t(2), t(2)]) == "input 0 has element type float32, expected bool"
    assert infer_error("Where", [t(2), t(2), t(2)]) == "input 0 has element type float32, expected bool"
    assert infer_error("Less", [t(2), t(2, dtype="int64")]) == "input 1 has element type int64, expected float32"
    (y,) = reference("Xor", [np.array([True, True, False, False]), np.array([True, False, True, False])])
    assert y.tolist() == [False, True, True, False]


def test_cast_types():
    assert infer("Cast", [t(2, 3)], {"to": 7}) == [t(2, 3, dtype="int64")]
    assert infer("Cast", [t(2)], {"to": "bool"}) == [t(2, dtype="bool")]
    # every ONNX numeric type is an element type of its own (docs/KERNELS.md)
    assert infer("Cast", [t(2)], {"to": 6}) == [t(2, dtype="int32")]
    assert infer("Cast", [t(2, dtype="int64")], {"to": 11}) == [t(2, dtype="float64")]
    assert "strings, ONNX type 8, are not supported" in infer_error("Cast", [t(2)], {"to": 8})
    assert "must be an element type Tinsmith supports" in infer_error("Cast", [t(2)], {"to": 99})
    (y,) = reference("Cast", [f32(-2.7, -0.5, 0.5, 2.7)], {"to": 7})
    assert y.tolist() == [-2, 0, 0, 2]  # toward zero, as static_cast
    (y,) = reference("Cast", [f32(-2.0, 0.0, 0.1)], {"to": 9})
    assert y.tolist() == [True, False, True]


def test_layout_shapes():
    assert infer("Flatten", [t(2, 3, 4, 5)], {"axis": 0}) == [t(1, 120)]
    assert infer("Flatten", [t(2, 3, 4, 5)], {"axis": -1}) == [t(24, 5)]
    assert infer("Flatten", [t(2, 3, 4, 5)], {"axis": 4}) == [t(120, 1)]
    assert infer("Squeeze", [t(1, 3, 1, 5), t(1, dtype="int64")], values=[None, i64(-2)]) == [t(1, 3, 5)]
    assert infer("Squeeze", [t(1, 3, 1, 5)]) == [t(3, 5)]
    assert infer("Unsqueeze", [t(3, 4, 5), t(3, dtype="int64")], values=[None, i64(5, 4, 2)]) == \
        [t(3, 4, 1, 5, 1, 1)]
    assert infer("Expand", [t(3, 1), t(3, dtype="int64")], values=[None, i64(2, 1, 6)]) == [t(2, 3, 6)]
    assert infer("Tile", [t(2, 3), t(2, dtype="int64")], values=[None, i64(3, 2)]) == [t(6, 6)]
    assert infer("DepthToSpace", [t(1, 8, 2, 3)], {"blocksize": 2}) == [t(1, 2, 4, 6)]
    assert infer("SpaceToDepth", [t(1, 2, 4, 6)], {"blocksize": 2}) == [t(1, 8, 2, 3)]
    assert infer("Dropout", [t(3, 4)]) == [t(3, 4), t(3, 4, dtype="bool")]
    assert infer_error("Squeeze", [t(1, 3), t(1, dtype="int64")], values=[None, i64(1)]) == \
        "cannot squeeze axis 1 of shape [1, 3]: its size is 3, not 1"
    assert infer_error("Unsqueeze", [t(3)], {}) == "Unsqueeze needs axes, as input 1 or attribute 'axes'"
    assert infer_error("Tile", [t(2, 3), t(1, dtype="int64")], values=[None, i64(2)]) == \
        "Tile's repeats [2] must be 2 non-negative numbers, one per axis of [2, 3]"
    assert infer_error("DepthToSpace", [t(1, 6, 2, 2)], {"blocksize": 2}) == \
        "DepthToSpace needs channels (6) divisible by blocksize squared (4)"


def test_depth_to_space_by_hand():
    x = np.arange(8, dtype=np.float32).reshape(1, 8, 1, 1)
    (dcr,) = reference("DepthToSpace", [x], {"blocksize": 2})
    (crd,) = reference("DepthToSpace", [x], {"blocksize": 2, "mode": "CRD"})
    # DCR: depth is (block row, block column, channel); CRD: (channel, block row, block column)
    assert dcr[0].tolist() == [[[0, 2], [4, 6]], [[1, 3], [5, 7]]]
    assert crd[0].tolist() == [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]
    (back,) = reference("SpaceToDepth", [dcr], {"blocksize": 2})
    assert back.tolist() == x.tolist()


def test_slice_and_pad_by_hand():
    x = np.arange(10, dtype=np.float32)
    starts, ends, axes, steps = i64(8), i64(1), i64(0), i64(-3)
    assert infer("Slice", [t(10), t(1, dtype="int64"), t(1, dtype="int64"), t(1, dtype="int64"),
                           t(1, dtype="int64")], values=[None, starts, ends, axes, steps]) == [t(3)]
    (y,) = reference("Slice", [x, starts, ends, axes, steps])
    assert y.tolist() == [8, 5, 2]
    (y,) = reference("Slice", [x, i64(-100), i64(3)])
    assert y.tolist() == [0, 1, 2]
    row = f32(1, 2, 3)
    for mode, want in {"constant": [0, 0, 1, 2, 3, 0], "reflect": [3, 2, 1, 2, 3, 2], "edge": [1, 1, 1, 2, 3, 3],
                       "wrap": [2, 3, 1, 2, 3, 1]}.items():
        (y,) = reference("Pad", [row, i64(2, 1)], {"mode": mode})
        assert y.tolist() == want, mode
    (y,) = reference("Pad", [row, i64(-1, 2), scalar(9)])
    assert y.tolist() == [2, 3, 9, 9]
    assert infer_error("Pad", [t(3), t(2, dtype="int64")], {"mode": "reflect"}, [None, i64(3, 0)]) == \
        "Pad reflects axis 0 of size 3 by 3; at most 2 fit"


def test_gather_by_hand():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert infer("Gather", [t(3, 4), t(2, 2, dtype="int64")], {"axis": 1}) == [t(3, 2, 2)]
    (y,) = reference("Gather", [x, np.array([[0, -1], [2, 1]], np.int64)], {"axis": 1})
    assert y.tolist() == [[[0, 3], [2, 1]], [[4, 7], [6, 5]], [[8, 11], [10, 9]]]
    assert infer_error("Gather", [t(3, 4), t(1, dtype="int64")], {"axis": 0}, [None, i64(3)]) == \
        "Gather's index 3 is out of range for an axis of size 3"


def test_reductions_by_hand():
    x = f32(1, 2, 3, 4, 5, 6).reshape(2, 3)
    want = {"ReduceSum": [6, 15], "ReduceMax": [3, 6], "ReduceMin": [1, 4], "ReduceProd": [6, 120],
            "ReduceL1": [6, 15], "ReduceL2": [math.sqrt(14), math.sqrt(77)], "ReduceSumSquare": [14, 77],
            "ReduceLogSum": [math.log(6), math.log(15)], "ReduceMean": [2, 5],
            "ReduceLogSumExp": [math.log(sum(math.exp(v) for v in (1, 2, 3))),
                                math.log(sum(math.exp(v) for v in (4, 5, 6)))]}
    for op, values in want.items():
        assert infer(op, [t(2, 3)], {"axes": [1], "keepdims": 0}) == [t(2)]
        (y,) = reference(op, [x], {"axes": [1], "keepdims": 0})
        np.testing.assert_allclose(y, values, rtol=1e-6, err_msg=op)
    assert infer("ReduceSum", [t(2, 3), t(0, dtype="int64")], {"noop_with_empty_axes": 1},
                 [None, np.zeros(0, np.int64)]) == [t(2, 3)]
    ties = f32(1, 3, 3, 0)
    assert reference("ArgMax", [ties])[0].tolist() == [1]
    assert reference("ArgMax", [ties], {"select_last_index": 1})[0].tolist() == [2]
    assert reference("ArgMin", [ties], {"keepdims": 0})[0].tolist() == 3
    assert reference("Hardmax", [ties])[0].tolist() == [0, 1, 0, 0]
    (c,) = reference("CumSum", [f32(1, 2, 3, 4), np.array(0, np.int64)], {"exclusive": 1, "reverse": 1})
    assert c.tolist() == [9, 7, 4, 0]


def test_resize_nearest_by_hand():
    x = f32(1, 2, 3, 4).reshape(1, 1, 2, 2)
    types = [t(1, 1, 2, 2), None, t(4)]
    values = [None, None, f32(1, 1, 2, 3)]
    assert infer("Resize", types, {"mode": "nearest"}, values) == [t(1, 1, 4, 6)]
    (y,) = reference("Resize", [x, None, f32(1, 1, 2, 3)], {"mode": "nearest"})
    assert y[0, 0].tolist() == [[1, 1, 1, 2, 2, 2], [1, 1, 1, 2, 2, 2], [3, 3, 3, 4, 4, 4], [3, 3, 3, 4, 4, 4]]
    (y,) = reference("Resize", [x, None, f32(1, 1, 2, 2)], {"mode": "linear"})
    # half_pixel: output 1 samples 0.25 between input 0 and 1
    np.testing.assert_allclose(y[0, 0, 0], [1, 1.25, 1.75, 2])
    assert "antialias is not supported" in infer_error("Resize", types, {"antialias": 1}, values)


def test_loop_ir_casts_typed_locals_and_logic():
    from tinsmith.generate.loop_ir import Binary, Cast, Const, For, Kernel, Load, Local, Store, Unary, Var
    from tinsmith.generate.render import render_expr, render_stmts
    from tinsmith.generate.simplify import simplify

    assert render_expr(Cast("std::int64_t", Load("x", Var("i")))) == "static_cast<std::int64_t>(t_x[i])"
    assert render_expr(Unary("not", Load("p", Var("i")))) == "!t_p[i]"
    assert render_expr(Unary("round", Var("v"))) == "tinsmith::math::nearbyint(v)"
    assert render_expr(Binary("fmod", Var("a"), Var("b"))) == "tinsmith::math::fmod(a, b)"
    assert render_stmts((Local("best", Const(0, False), "int"),), 0) == ["int best = 0;"]
    assert render_stmts((Local("acc", Const(0, True)),), 0) == ["float acc = 0.0f;"]
    # a one-iteration loop's index is substituted inside casts too
    kernel = simplify(Kernel("k", (), (For("i", 1, (Store("y", Var("i"), Cast("float", Var("i"))),)),)))
    assert kernel.body == (Store("y", Const(0, False), Cast("float", Const(0, False))),)
