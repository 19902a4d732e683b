"""Read a TensorFlow Lite flatbuffer (.tflite) into a GraphSpec of quantized primitives.

The `tflite` package (the flatbuffer schema's generated Python readers) reads the file; this
module maps each builtin operator of the first subgraph onto codegen/ops/quantized.py's
primitives, doing what TFLite Micro's Prepare does once per node: explicit pads from SAME/VALID,
fused activations as clamps of the output, and per-channel requantization multipliers
(tinsmith.quant.fixed_point) as int32 constants. Tensors keep TFLite's NHWC layout. Operators it
cannot map are all reported at once.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from tinsmith import limits
from tinsmith.errors import GraphError, SourceLoc
from tinsmith.files import irregular_file
from tinsmith.ir import Constant, TensorType
from tinsmith.ir.names import numbered
from tinsmith.ir.graph import Quant
from tinsmith.load.graph_file import GraphSpec, NodeSpec, ValueSpec, display_path
from tinsmith.load.onnx_model import graph_name_of, unique_names
from tinsmith.quant import activations
from tinsmith.quant import fixed_point as fp

TFLITE_SUFFIXES = (".tflite",)
# TFLite TensorType numbers and the Tinsmith element type of each
TENSOR_TYPES = {0: "float32", 2: "int32", 3: "uint8", 4: "int64", 7: "int16", 9: "int8"}
ACTIVATIONS = {0: "none", 1: "relu", 2: "relu_n1_to_1", 3: "relu6"}


def _tflite():
    import tflite  # imported when needed: YAML and ONNX graphs do not pay for it
    return tflite


@dataclass
class _Reader:
    """Walks one model; collects constants, nodes and the operators it cannot map."""

    path: Path
    where: str
    model: object
    graph: object
    names: dict[int, str] = field(default_factory=dict)
    originals: dict[str, str] = field(default_factory=dict)
    constants: dict[str, Constant] = field(default_factory=dict)
    nodes: list[NodeSpec] = field(default_factory=list)
    unsupported: dict[str, int] = field(default_factory=dict)

    @property
    def loc(self) -> SourceLoc:
        return SourceLoc(self.where, 1, 1)

    # --- tensors ---
    def tensor(self, i: int):
        if not 0 <= int(i) < self.graph.TensorsLength():
            raise GraphError(self.loc, f"an operator or the graph refers to tensor {int(i)}, but the model has "
                             f"{self.graph.TensorsLength()} tensors")
        return self.graph.Tensors(int(i))

    def dtype(self, i: int) -> str:
        t = self.tensor(i)
        if t.Type() not in TENSOR_TYPES:
            raise GraphError(self.loc, f"tensor '{self.original(i)}' has TFLite type {t.Type()}, which Tinsmith "
                             f"does not support")
        return TENSOR_TYPES[t.Type()]

    def original(self, i: int) -> str:
        name = self.tensor(i).Name()
        return name.decode("utf-8", "replace") if name is not None else f"tensor{int(i)}"

    def quant(self, i: int) -> Quant | None:
        q = self.tensor(i).Quantization()
        if q is None or q.ScaleLength() == 0:
            return None
        scales, zps = q.ScaleAsNumpy(), q.ZeroPointAsNumpy()
        zps = zps if isinstance(zps, np.ndarray) and zps.size else np.zeros(1, np.int64)
        axis = int(q.QuantizedDimension()) if scales.size > 1 else None
        try:
            return Quant(tuple(float(s) for s in scales), tuple(int(z) for z in zps), axis)
        except ValueError as e:  # (counts that disagree, scales that are not positive and finite)
            raise GraphError(self.loc, f"tensor '{self.original(i)}' has an invalid quantization: {e}") from None

    def shape(self, i: int) -> tuple[int, ...]:
        s = self.tensor(i).ShapeAsNumpy()
        shape = tuple(int(d) for d in s) if isinstance(s, np.ndarray) else ()
        if any(d < 0 for d in shape):
            raise GraphError(self.loc, f"tensor '{self.original(i)}' has shape {list(shape)}: dimensions cannot be "
                             f"negative")
        problem = limits.shape_problem(shape)
        if problem:
            raise GraphError(self.loc, f"tensor '{self.original(i)}' {problem}",
                             limits.hint("rank" if "'rank'" in problem else "tensor_elements"))
        return shape

    def data(self, i: int) -> np.ndarray | None:
        """A constant tensor's data, or None for a tensor computed at run time."""
        index = self.tensor(i).Buffer()
        if index >= self.model.BuffersLength():
            raise GraphError(self.loc, f"tensor '{self.original(i)}' refers to buffer {index}, but the model has "
                             f"{self.model.BuffersLength()} buffers")
        buf = self.model.Buffers(index)
        raw = buf.DataAsNumpy() if buf is not None else 0
        if not isinstance(raw, np.ndarray) or raw.size == 0:
            return None
        dtype, shape = np.dtype(self.dtype(i)).newbyteorder("<"), self.shape(i)
        if any(d < 0 for d in shape) or raw.size != dtype.itemsize * math.prod(shape):
            raise GraphError(self.loc, f"tensor '{self.original(i)}' has shape {list(shape)} of {self.dtype(i)} "
                             f"but its buffer holds {raw.size} bytes")
        return np.frombuffer(raw.tobytes(), dtype=dtype).astype(self.dtype(i)).reshape(shape)

    def value(self, i: int) -> str:
        """The identifier of tensor i; a constant tensor becomes a graph constant on first use."""
        name = self.names[int(i)]
        data = self.data(i)
        if data is not None and name not in self.constants:
            self.constants[name] = Constant(name, np.ascontiguousarray(data), f"{self.where} tensor "
                                            f"'{self.original(i)}'", self.loc, self.quant(i))
        return name

    def add_constant(self, hint: str, data: np.ndarray) -> str:
        name = numbered(hint, set(self.constants) | set(self.names.values()))
        self.constants[name] = Constant(name, np.ascontiguousarray(data), "TFLite import", self.loc)
        return name

    def required_quant(self, i: int) -> Quant:
        """Tensor i's quantization, which the operator reading it needs."""
        q = self.quant(i)
        if q is None:
            raise GraphError(self.loc, f"tensor '{self.original(i)}' is not quantized",
                             "Tinsmith imports full-integer (int8) TFLite models")
        return q

    def scale_zp(self, i: int) -> tuple[float, int]:
        q = self.required_quant(i)
        return q.scale[0], q.zero_point[0]

    def integer_dtype(self, out: int) -> str:
        """The element type of a quantized operator's output, which must be an integer type."""
        if self.dtype(out) not in fp.DTYPE_RANGES:
            raise GraphError(self.loc, f"tensor '{self.original(out)}' is {self.dtype(out)}, but the output of a "
                             f"quantized operator must be an integer type (int8)")
        return self.dtype(out)

    def act(self, out: int, code: int) -> dict:
        dtype = self.integer_dtype(out)
        scale, zp = self.scale_zp(out)
        lo, hi = fp.activation_range(ACTIVATIONS.get(code, "none"), scale, zp, dtype)
        return {"act_min": lo, "act_max": hi}

    def emit(self, op: str, inputs, outputs, attrs: Mapping) -> None:
        n = len(self.nodes)
        loc = self.loc
        self.nodes.append(NodeSpec(op, f"{op.lower()}_{n}", tuple(inputs), tuple(outputs), dict(attrs), loc, loc,
                                   tuple(loc for _ in inputs), tuple(loc for _ in outputs)))


def _empty_table() -> tuple[bytes, int]:
    """A flatbuffer table with no fields (bytes, position): its readers return the defaults."""
    import flatbuffers
    b = flatbuffers.Builder(16)
    b.StartObject(0)
    b.Finish(b.EndObject())
    data = bytes(b.Output())
    return data, flatbuffers.encode.Get(flatbuffers.packer.uoffset, data, 0)


def _options(op, cls_name: str):
    tfl = _tflite()
    table = op.BuiltinOptions()
    opts = getattr(tfl, cls_name)()
    if table is not None:
        opts.Init(table.Bytes, table.Pos)
    else:  # options left out: every field at its schema default, as TFLite reads them
        opts.Init(*_empty_table())
    return opts


def _same_pads(in_size: int, k: int, stride: int, dilation: int) -> tuple[int, int]:
    """TensorFlow's SAME padding: output ceil(in / stride), the odd extra row at the end."""
    out = -(-in_size // stride)
    total = max((out - 1) * stride + (k - 1) * dilation + 1 - in_size, 0)
    return total // 2, total - total // 2


def _pads(r: _Reader, x: int, kh: int, kw: int, opts, dil=(1, 1)) -> list[int]:
    if opts.Padding() == 1:  # VALID
        return [0, 0, 0, 0]
    _, h, w, _ = r.shape(x)
    top, bottom = _same_pads(h, kh, opts.StrideH(), dil[0])
    left, right = _same_pads(w, kw, opts.StrideW(), dil[1])
    return [top, left, bottom, right]


def _requant_constants(r: _Reader, x: int, w: int, y: int, hint: str) -> list[str]:
    x_scale, _ = r.scale_zp(x)
    y_scale, _ = r.scale_zp(y)
    mult, shift = fp.conv_multipliers(x_scale, r.required_quant(w).scale, y_scale)
    return [r.add_constant(f"{hint}_multiplier", mult), r.add_constant(f"{hint}_shift", shift)]


def _bias(r: _Reader, inputs) -> str:
    return r.value(inputs[2]) if len(inputs) > 2 and inputs[2] >= 0 else ""


def _conv(r: _Reader, op, inputs, outputs, depthwise: bool) -> None:
    x, w, y = int(inputs[0]), int(inputs[1]), int(outputs[0])
    opts = _options(op, "DepthwiseConv2DOptions" if depthwise else "Conv2DOptions")
    _, kh, kw, _ = r.shape(w)
    dil = (opts.DilationHFactor() or 1, opts.DilationWFactor() or 1)
    y_scale, y_zp = r.scale_zp(y)
    attrs = {"strides": [opts.StrideH(), opts.StrideW()], "dilations": list(dil),
             "pads": _pads(r, x, kh, kw, opts, dil), "x_zero_point": r.scale_zp(x)[1], "y_scale": y_scale,
             "y_zero_point": y_zp, **r.act(y, opts.FusedActivationFunction())}
    if depthwise:
        attrs["depth_multiplier"] = r.shape(w)[3] // r.shape(x)[3]
    name = r.names[y]
    r.emit("QDepthwise" if depthwise else "QConv2D",
           [r.value(x), r.value(w), _bias(r, inputs), *_requant_constants(r, x, w, y, name)], [name], attrs)


def _fully_connected(r: _Reader, op, inputs, outputs) -> None:
    x, w, y = int(inputs[0]), int(inputs[1]), int(outputs[0])
    opts = _options(op, "FullyConnectedOptions")
    y_scale, y_zp = r.scale_zp(y)
    name = r.names[y]
    flat = r.names[y] + "_rows"
    attrs = {"x_zero_point": r.scale_zp(x)[1], "y_scale": y_scale, "y_zero_point": y_zp,
             **r.act(y, opts.FusedActivationFunction())}
    rows = int(np.prod(r.shape(x))) // r.shape(w)[1]
    out_shape = r.shape(y)
    target = name if out_shape == (rows, r.shape(w)[0]) else flat
    r.emit("QFullyConnected", [r.value(x), r.value(w), _bias(r, inputs), *_requant_constants(r, x, w, y, name)],
           [target], attrs)
    if target != name:  # keep_num_dims: the rows take the input's leading dimensions back
        r.emit("Reshape", [target, r.add_constant(f"{name}_shape", np.array(out_shape, np.int64))], [name], {})


def _binary(kind: str):
    def read(r: _Reader, op, inputs, outputs) -> None:
        a, b, y = int(inputs[0]), int(inputs[1]), int(outputs[0])
        opts = _options(op, f"{kind.title()}Options")
        (a_s, a_zp), (b_s, b_zp), (y_s, y_zp) = r.scale_zp(a), r.scale_zp(b), r.scale_zp(y)
        r.emit(f"Q{kind.title()}", [r.value(a), r.value(b)], [r.names[y]],
               {"a_scale": a_s, "a_zero_point": a_zp, "b_scale": b_s, "b_zero_point": b_zp, "y_scale": y_s,
                "y_zero_point": y_zp, **r.act(y, opts.FusedActivationFunction())})
    return read


def _pool(kind: str):
    def read(r: _Reader, op, inputs, outputs) -> None:
        x, y = int(inputs[0]), int(outputs[0])
        opts = _options(op, "Pool2DOptions")
        k = (opts.FilterHeight(), opts.FilterWidth())
        r.emit(kind, [r.value(x)], [r.names[y]],
               {"kernel_shape": list(k), "strides": [opts.StrideH(), opts.StrideW()],
                "pads": _pads(r, x, k[0], k[1], opts), **r.act(y, opts.FusedActivationFunction())})
    return read


def _reshape(r: _Reader, op, inputs, outputs) -> None:
    y = int(outputs[0])
    shape = r.add_constant(f"{r.names[y]}_shape", np.array(r.shape(y), np.int64))
    r.emit("Reshape", [r.value(inputs[0]), shape], [r.names[y]], {})


def _mean(r: _Reader, op, inputs, outputs) -> None:
    x, y = int(inputs[0]), int(outputs[0])
    axes = sorted(int(a) % 4 for a in np.atleast_1d(r.data(inputs[1])))
    if len(r.shape(x)) != 4 or axes != [1, 2]:
        raise _Unsupported(f"MEAN over axes {axes} (only over H and W of NHWC data)")
    (x_s, x_zp), (y_s, y_zp) = r.scale_zp(x), r.scale_zp(y)
    attrs = {"x_scale": x_s, "x_zero_point": x_zp, "y_scale": y_s, "y_zero_point": y_zp}
    if len(r.shape(y)) == 4:
        r.emit("QMean", [r.value(x)], [r.names[y]], attrs)
    else:
        pooled = r.names[y] + "_pooled"
        r.emit("QMean", [r.value(x)], [pooled], attrs)
        r.emit("Reshape", [pooled, r.add_constant(f"{r.names[y]}_shape", np.array(r.shape(y), np.int64))],
               [r.names[y]], {})


def _softmax(r: _Reader, op, inputs, outputs) -> None:
    x, y = int(inputs[0]), int(outputs[0])
    opts = _options(op, "SoftmaxOptions")
    (x_s, _), (y_s, y_zp) = r.scale_zp(x), r.scale_zp(y)
    r.emit("QSoftmax", [r.value(x)], [r.names[y]], {"beta": float(opts.Beta()), "x_scale": x_s,
                                                    "y_scale": y_s, "y_zero_point": y_zp})


def _quantize(r: _Reader, op, inputs, outputs) -> None:
    x, y = int(inputs[0]), int(outputs[0])
    y_s, y_zp = r.scale_zp(y)
    if r.dtype(x) == "float32":
        r.emit("Quantize", [r.value(x)], [r.names[y]], {"y_scale": y_s, "y_zero_point": y_zp, "dtype": r.dtype(y)})
    else:
        x_s, x_zp = r.scale_zp(x)
        r.emit("Requantize", [r.value(x)], [r.names[y]], {"x_scale": x_s, "x_zero_point": x_zp, "y_scale": y_s,
                                                          "y_zero_point": y_zp, "dtype": r.dtype(y)})


def _relu(activation: str):
    def read(r: _Reader, op, inputs, outputs) -> None:
        """TFLite's int8 RELU: the input rescaled to the output and clamped to the activation's
        range (TFLite Micro's ReluQuantized)."""
        x, y = int(inputs[0]), int(outputs[0])
        (x_s, x_zp), (y_s, y_zp) = r.scale_zp(x), r.scale_zp(y)
        lo, hi = fp.activation_range(activation, y_s, y_zp, r.integer_dtype(y))
        r.emit("Requantize", [r.value(x)], [r.names[y]], {"x_scale": x_s, "x_zero_point": x_zp, "y_scale": y_s,
                                                          "y_zero_point": y_zp, "dtype": r.dtype(y),
                                                          "act_min": lo, "act_max": hi})
    return read


def _dequantize(r: _Reader, op, inputs, outputs) -> None:
    x, y = int(inputs[0]), int(outputs[0])
    x_s, x_zp = r.scale_zp(x)
    r.emit("Dequantize", [r.value(x)], [r.names[y]], {"x_scale": x_s, "x_zero_point": x_zp})


def _pad(r: _Reader, op, inputs, outputs) -> None:
    x, y = int(inputs[0]), int(outputs[0])
    widths = np.asarray(r.data(inputs[1])).reshape(-1, 2)
    r.emit("QPad", [r.value(x)], [r.names[y]],
           {"pads": [int(v) for v in widths[:, 0]] + [int(v) for v in widths[:, 1]], "x_zero_point": r.scale_zp(x)[1]})


def _concat(r: _Reader, op, inputs, outputs) -> None:
    opts = _options(op, "ConcatenationOptions")
    if opts.FusedActivationFunction():
        raise _Unsupported("CONCATENATION with a fused activation")
    r.emit("QConcat", [r.value(i) for i in inputs], [r.names[int(outputs[0])]], {"axis": int(opts.Axis())})


def _table_function(function: str):
    def read(r: _Reader, op, inputs, outputs) -> None:
        """TFLite's int8 LOGISTIC / TANH: TFLite Micro's fixed-point function of every int8 input,
        tabulated at import (codegen/quant/activations.py) and looked up per element."""
        x, y = int(inputs[0]), int(outputs[0])
        if r.dtype(x) != "int8":
            raise _Unsupported(f"{function.upper()} on {r.dtype(x)} data (only int8)")
        (x_s, x_zp), (y_s, y_zp) = r.scale_zp(x), r.scale_zp(y)
        want = activations.OUTPUT_QUANT[function]
        if (np.float32(y_s), y_zp) != (np.float32(want[0]), want[1]):
            raise _Unsupported(f"{function.upper()} with output scale {y_s} and zero point {y_zp} (TFLite "
                               f"requires {want[0]} and {want[1]})")
        table = r.add_constant(f"{r.names[y]}_table", activations.int8_table(function, x_s, x_zp))
        r.emit("QLookup", [r.value(x), table], [r.names[y]], {"y_scale": y_s, "y_zero_point": y_zp})
    return read


class _Unsupported(Exception):
    """An operator (or a form of one) the importer cannot map."""


OPERATORS: dict[str, Callable] = {
    "CONV_2D": lambda r, op, i, o: _conv(r, op, i, o, False),
    "DEPTHWISE_CONV_2D": lambda r, op, i, o: _conv(r, op, i, o, True),
    "FULLY_CONNECTED": _fully_connected,
    "ADD": _binary("add"), "MUL": _binary("mul"),
    "AVERAGE_POOL_2D": _pool("QAvgPool"), "MAX_POOL_2D": _pool("QMaxPool"),
    "RESHAPE": _reshape, "MEAN": _mean, "SOFTMAX": _softmax,
    "QUANTIZE": _quantize, "DEQUANTIZE": _dequantize, "PAD": _pad, "CONCATENATION": _concat,
    # (TFLite Micro's int8 RELU6 clamps the input's integers without rescaling them to the output's
    # quantization, which a typed graph cannot say: it stays unsupported)
    "RELU": _relu("relu"),
    "LOGISTIC": _table_function("logistic"), "TANH": _table_function("tanh"),
}


@dataclass(frozen=True)
class TfliteModel:
    """An imported model: the GraphSpec and the original tensor names of renamed values."""

    spec: GraphSpec
    values: Mapping[str, str]  # identifier -> original TFLite tensor name, where they differ


def read_tflite(path: str | Path) -> TfliteModel:
    """Read a .tflite file; every problem is a GraphError at the file."""
    tfl = _tflite()
    from tflite.utils import opcode2name
    path = Path(path)
    where = display_path(path)
    problem = irregular_file(path)
    if problem:
        raise GraphError(SourceLoc(where, 1, 1), f"cannot read model file: {problem}")
    try:
        buf = path.read_bytes()
        model = tfl.Model.GetRootAsModel(buf, 0)
        graph = model.Subgraphs(0) if model.SubgraphsLength() > 0 else None
    except FileNotFoundError:
        raise GraphError(SourceLoc(where, 1, 1), "cannot read model file: No such file or directory") from None
    except Exception as e:
        raise GraphError(SourceLoc(where, 1, 1), f"not a valid TFLite model ({type(e).__name__})") from None
    if graph is None:
        raise GraphError(SourceLoc(where, 1, 1), "not a valid TFLite model: it has no subgraph")
    try:
        return _read_graph(path, where, model, graph)
    except Exception as e:
        if not _raised_by_the_flatbuffer_readers(e):
            raise
        raise GraphError(SourceLoc(where, 1, 1), f"not a valid TFLite model: the flatbuffer holds an offset, "
                         f"length or value its schema does not allow ({type(e).__name__})") from None


def _raised_by_the_flatbuffer_readers(e: Exception) -> bool:
    """Whether `e` comes from the flatbuffers runtime or the schema's readers (the `tflite` package):
    the file lies about its layout. The readers are lazy, so this can happen at any read; errors of
    the importer's own code stay errors."""
    import flatbuffers
    import traceback
    frames = traceback.extract_tb(e.__traceback__)
    readers = (str(Path(flatbuffers.__file__).parent), str(Path(_tflite().__file__).parent))
    return bool(frames) and frames[-1].filename.startswith(readers)


def _indices(vector) -> list[int]:
    """A vector of tensor indices as ints (the readers return 0 for a vector the file leaves out)."""
    return [int(i) for i in vector] if isinstance(vector, np.ndarray) else []


# Inputs each operator needs at least (more are optional: a bias, -1 where left out)
MIN_INPUTS = {"CONV_2D": 2, "DEPTHWISE_CONV_2D": 2, "FULLY_CONNECTED": 2, "ADD": 2, "MUL": 2, "MEAN": 2, "PAD": 2}


def _operands(r: _Reader, k: int, name: str, op) -> tuple[list[int], list[int]]:
    """Operator k's input and output tensor indices, each checked against the model."""
    inputs, outputs = _indices(op.InputsAsNumpy()), _indices(op.OutputsAsNumpy())
    need = MIN_INPUTS.get(name, 1)
    if len(inputs) < need or not outputs or any(i < 0 for i in inputs[:need]):
        raise GraphError(r.loc, f"operator {k} ({name}) has {len(inputs)} inputs and {len(outputs)} outputs; it "
                         f"needs at least {need} inputs and one output")
    for i in [i for i in inputs if i != -1] + outputs:
        r.tensor(i)
    return inputs, outputs


def _read_graph(path: Path, where: str, model, graph) -> TfliteModel:
    from tflite.utils import opcode2name
    r = _Reader(path, where, model, graph)
    originals = [r.original(i) for i in range(graph.TensorsLength())]
    # the converter names a fused tensor after every op it absorbed ("a/Relu;a/BiasAdd;..."): the
    # first is enough for an identifier
    short = [n.split(";")[0] for n in originals]
    uses = Counter(short)
    ids = unique_names([f"{s}_{i}" if uses[s] > 1 else s for i, s in enumerate(short)], "t")
    r.names = {i: ids[f"{s}_{i}" if uses[s] > 1 else s] for i, s in enumerate(short)}
    codes = []
    for k in range(graph.OperatorsLength()):
        op = graph.Operators(k)
        if op.OpcodeIndex() >= model.OperatorCodesLength():
            raise GraphError(r.loc, f"operator {k} refers to operator code {op.OpcodeIndex()}, but the model has "
                             f"{model.OperatorCodesLength()}")
        oc = model.OperatorCodes(op.OpcodeIndex())
        codes.append((op, opcode2name(max(oc.BuiltinCode(), oc.DeprecatedBuiltinCode()))))
    missing = sorted({name for _, name in codes if name not in OPERATORS})
    if missing:
        raise GraphError(SourceLoc(where, 1, 1), f"unsupported TFLite operator{'s' * (len(missing) > 1)}: "
                         f"{', '.join(missing)}", f"supported: {', '.join(sorted(OPERATORS))}")
    forms = []
    for k, (op, name) in enumerate(codes):
        inputs, outputs = _operands(r, k, name, op)
        try:
            OPERATORS[name](r, op, inputs, outputs)
        except _Unsupported as e:
            forms.append(str(e))
        except (ValueError, IndexError, TypeError, ZeroDivisionError) as e:
            # (operands of the wrong rank, constants missing where the operator needs them)
            raise GraphError(r.loc, f"operator {k} ({name}): its tensors do not fit the operator "
                             f"({type(e).__name__}: {e})") from None
    if forms:
        raise GraphError(SourceLoc(where, 1, 1), "unsupported TFLite operators: " + "; ".join(forms))
    graph_inputs, graph_outputs = _indices(graph.InputsAsNumpy()), _indices(graph.OutputsAsNumpy())
    for i in graph_inputs + graph_outputs:
        r.tensor(i)
    inputs = tuple(ValueSpec(r.names[i], TensorType(r.dtype(i), r.shape(i), r.quant(i)), r.loc, r.loc)
                   for i in graph_inputs)
    outputs = tuple(ValueSpec(r.names[i], None, r.loc) for i in graph_outputs)
    spec = GraphSpec(graph_name_of(path), where, inputs, outputs, tuple(r.constants.values()), tuple(r.nodes),
                     r.loc)
    renamed = {r.names[i]: n for i, n in enumerate(originals) if r.names[i] != n}
    return TfliteModel(spec, renamed)


def load_tflite_spec(path: str | Path) -> GraphSpec:
    """Read a .tflite file into a GraphSpec (see read_tflite)."""
    return read_tflite(path).spec


def original_names(path: str | Path) -> dict[str, str]:
    """Original tensor name -> identifier, for the inputs and outputs renamed on import."""
    return {old: new for new, old in read_tflite(path).values.items()}
