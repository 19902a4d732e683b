"""One TFLite subgraph as the operator converters see it: tensors by index (type, shape,
quantization, constant data), options tables read with the schema's defaults, TensorFlow's
SAME/VALID padding, and the nodes and constants the converters add to the GraphSpec."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import numpy as np

from tinsmith import limits
from tinsmith.errors import GraphError, SourceLoc
from tinsmith.ir import Constant, TensorType
from tinsmith.ir.graph import Quant
from tinsmith.ir.names import numbered
from tinsmith.load.graph_file import NodeSpec
from tinsmith.quant import fixed_point as fp

# TFLite TensorType numbers and the Tinsmith element type of each
TENSOR_TYPES = {0: "float32", 2: "int32", 3: "uint8", 4: "int64", 6: "bool", 7: "int16", 9: "int8", 12: "uint64",
                15: "uint32", 16: "uint16"}
# Types stored in a file that no graph value takes: float16 weights, which a DEQUANTIZE (or a
# DENSIFY, then a DEQUANTIZE) turns into float32 constants at build time
STORED_ONLY_TYPES = {1: "float16"}
TENSOR_TYPE_NAMES = {1: "float16", 5: "string", 8: "complex64", 10: "float64", 11: "complex128",
                     13: "resource", 14: "variant", 17: "int4"}
ACTIVATIONS = {0: "none", 1: "relu", 2: "relu_n1_to_1", 3: "relu6"}
# fused activation code -> (low, high) clamp of a float output; TANH and SIGN_BIT are not clamps
FLOAT_CLAMPS = {1: (0.0, None), 2: (-1.0, 1.0), 3: (0.0, 6.0)}


@dataclass
class KeptValue:
    """A value kept between invocations (ir.State) as the importer gathers it: the value a call
    starts from (`read`, of `type`), what it holds before the first call (`fill`), and the value
    the call ends with (`write`, once an operator sets it)."""

    read: str
    type: TensorType
    fill: float = 0.0
    write: str | None = None


class Unsupported(Exception):
    """An operator (or a form of one) the importer cannot map; the message says which form."""


def tflite_schema():
    import tflite  # imported when needed: YAML and ONNX graphs do not pay for it
    return tflite


def builtin_code(operator_code) -> int:
    """The operator code's builtin operator, by TFLite's rule (schema_utils GetBuiltinCode): the
    larger of the two fields `builtin_code` (int32, schema 3a) and `deprecated_builtin_code` (int8,
    which holds 127 for the codes past it). Read from the table itself: the tflite package's
    BuiltinCode() returns the deprecated field whenever the new one is below 127, so a file that
    sets only the new field (Google's ai-edge-quantizer writes DEQUANTIZE as 6 and 0) would read as
    ADD (0)."""
    import flatbuffers
    tab = operator_code._tab
    offset = flatbuffers.number_types.UOffsetTFlags.py_type(tab.Offset(10))
    raw = tab.Get(flatbuffers.number_types.Int32Flags, offset + tab.Pos) if offset else 0
    return max(int(raw), int(operator_code.DeprecatedBuiltinCode()))


def _empty_table() -> tuple[bytes, int]:
    """A flatbuffer table with no fields (bytes, position): its readers return the defaults."""
    import flatbuffers
    b = flatbuffers.Builder(16)
    b.StartObject(0)
    b.Finish(b.EndObject())
    data = bytes(b.Output())
    return data, flatbuffers.encode.Get(flatbuffers.packer.uoffset, data, 0)


def options(op, cls_name: str):
    """Operator `op`'s builtin options as the schema class `cls_name`; left out, every field at its
    schema default, as TFLite reads them."""
    table = op.BuiltinOptions()
    opts = getattr(tflite_schema(), cls_name)()
    opts.Init(*((table.Bytes, table.Pos) if table is not None else _empty_table()))
    return opts


def same_pads(in_size: int, k: int, stride: int, dilation: int) -> tuple[int, int]:
    """TensorFlow's SAME padding: output ceil(in / stride), the odd extra row at the end."""
    out = -(-in_size // stride)
    total = max((out - 1) * stride + (k - 1) * dilation + 1 - in_size, 0)
    return total // 2, total - total // 2


@dataclass
class Reader:
    """Walks one model; collects constants and nodes for the GraphSpec."""

    path: Path
    where: str
    model: object
    graph: object
    names: dict[int, str] = field(default_factory=dict)
    constants: dict[str, Constant] = field(default_factory=dict)
    nodes: list[NodeSpec] = field(default_factory=list)
    operator: str = "node"  # what nodes are named after: the operator being converted ("conv_2d_3")
    # values kept between invocations: by variable tensor index, or by resource variable name
    states: dict[object, KeptValue] = field(default_factory=dict)
    # resource variables: handle tensor -> variable name, variable name -> its value now, and what
    # CALL_ONCE's init subgraph assigned it (tflite_variables.py)
    handles: dict[int, str] = field(default_factory=dict)
    variables: dict[str, str] = field(default_factory=dict)
    initial: dict[str, np.ndarray] = field(default_factory=dict)
    # tensors computed at build time (shapes, DENSIFY, DEQUANTIZE of float16 weights), by index
    folded: dict[int, np.ndarray] = field(default_factory=dict)

    @property
    def loc(self) -> SourceLoc:
        return SourceLoc.whole_file(self.where)

    # --- tensors ---
    def tensor(self, i: int):
        if not 0 <= int(i) < self.graph.TensorsLength():
            raise GraphError(self.loc, f"an operator or the graph refers to tensor {int(i)}, but the model has "
                             f"{self.graph.TensorsLength()} tensors")
        return self.graph.Tensors(int(i))

    def dtype(self, i: int) -> str:
        t = self.tensor(i)
        if t.Type() not in TENSOR_TYPES:
            kind = TENSOR_TYPE_NAMES.get(t.Type(), f"number {t.Type()}")
            raise GraphError(self.loc, f"tensor '{self.original(i)}' has TFLite type {kind}, which Tinsmith "
                             f"does not support", f"supported: {', '.join(TENSOR_TYPES.values())}; float16 only as "
                             f"constant weights read by DEQUANTIZE (or DENSIFY)")
        return TENSOR_TYPES[t.Type()]

    def element_type(self, i: int) -> str:
        """The element type that picks an operator's converter: dtype(i), or a type only stored
        (float16), which only the operators that fold it at build time take."""
        return STORED_ONLY_TYPES.get(self.tensor(i).Type()) or self.dtype(i)

    def original(self, i: int) -> str:
        """Tensor i's name in the model; an unnamed tensor is named after its index."""
        name = self.tensor(i).Name()
        return name.decode("utf-8", "replace") if name else f"tensor{int(i)}"

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

    def value_quant(self, i: int) -> Quant | None:
        """The quantization tensor i carries as a graph value: none for float32 data (TFLite ignores
        what a file gives a float tensor)."""
        return None if self.dtype(i) == "float32" else self.quant(i)

    def shape(self, i: int) -> tuple[int, ...]:
        s = self.tensor(i).ShapeAsNumpy()
        shape = tuple(int(d) for d in s) if isinstance(s, np.ndarray) else ()
        if any(d < 0 for d in shape):
            raise GraphError(self.loc, f"tensor '{self.original(i)}' has shape {list(shape)}: dimensions cannot be "
                             f"negative", "Tinsmith compiles models with static shapes")
        problem = limits.shape_problem(shape)
        if problem:
            raise GraphError(self.loc, f"tensor '{self.original(i)}' {problem}",
                             limits.hint("rank" if "'rank'" in problem else "tensor_elements"))
        return shape

    def stored_values(self, i: int) -> np.ndarray | None:
        """The values in tensor i's buffer, in order (one-dimensional), or None if it has none."""
        index = self.tensor(i).Buffer()
        if index >= self.model.BuffersLength():
            raise GraphError(self.loc, f"tensor '{self.original(i)}' refers to buffer {index}, but the model has "
                             f"{self.model.BuffersLength()} buffers")
        buf = self.model.Buffers(index)
        raw = buf.DataAsNumpy() if buf is not None else 0
        if buf is not None and buf.Offset() > 1:
            raw = self._beyond_the_flatbuffer(i, int(buf.Offset()), int(buf.Size()))
        if not isinstance(raw, np.ndarray) or raw.size == 0:
            return None
        name = self.element_type(i)
        dtype = np.dtype(name).newbyteorder("<")
        if raw.size % dtype.itemsize:
            raise GraphError(self.loc, f"tensor '{self.original(i)}' is {name} but its buffer holds {raw.size} bytes")
        return np.frombuffer(raw.tobytes(), dtype=dtype).astype(name)

    def _beyond_the_flatbuffer(self, i: int, offset: int, size: int) -> np.ndarray | None:
        """The bytes of a buffer stored after the flatbuffer (schema 3b: `offset` from the file's start,
        `size` long, as TFLite's readers take it when offset > 1), as files past 2 GiB and ai-edge-quantizer's
        models with more than 256 KiB of weights store them."""
        whole = self.model._tab.Bytes  # (the file: the model table is read from its start)
        if size <= 0:
            return None
        if offset + size > len(whole):
            raise GraphError(self.loc, f"tensor '{self.original(i)}' has its data at bytes {offset}..{offset + size} "
                             f"of the file, which has {len(whole)}")
        return np.frombuffer(bytes(whole[offset:offset + size]), np.uint8)

    def data(self, i: int) -> np.ndarray | None:
        """A constant tensor's data (stored, or computed at build time), or None for a tensor
        computed at run time."""
        if int(i) in self.folded:
            return self.folded[int(i)]
        values = self.stored_values(i)
        if values is None:
            return None
        shape = self.shape(i)
        if self.tensor(i).Sparsity() is not None:
            raise GraphError(self.loc, f"tensor '{self.original(i)}' is stored sparse, but it is read by an operator "
                             f"other than DENSIFY (which alone reads sparse tensors)")
        if values.size != math.prod(shape):
            raise GraphError(self.loc, f"tensor '{self.original(i)}' has shape {list(shape)} of "
                             f"{self.element_type(i)} but its buffer holds {values.nbytes} bytes")
        return values.reshape(shape)

    def constant_data(self, i: int, what: str) -> np.ndarray:
        """The data of tensor i, which the operator needs at build time (axes, shapes, permutations)."""
        data = self.data(i)
        if data is None:
            raise Unsupported(f"a {what} computed at run time (tensor '{self.original(i)}'; Tinsmith needs it "
                              f"constant)")
        return data

    def value(self, i: int) -> str:
        """The identifier of tensor i; a constant tensor becomes a graph constant on first use."""
        name = self.names[int(i)]
        data = self.data(i)
        if data is not None and name not in self.constants:
            self.constants[name] = Constant(name, np.array(data, order="C"), f"{self.where} tensor "
                                            f"'{self.original(i)}'", self.loc, self.value_quant(i))
        return name

    def state(self, i: int, what: str) -> str:
        """Variable tensor i (state kept between invocations, an LSTM's cell state): the value a call
        starts from, which the operator replaces with next_state(i)."""
        if int(i) < 0 or not self.tensor(i).IsVariable():
            raise Unsupported(f"its {what} is not a variable tensor (TFLite keeps that state in one)")
        if int(i) in self.states:
            raise Unsupported(f"its {what} (tensor '{self.original(i)}') is updated by another operator too")
        q = self.quant(i)
        # TFLite Micro zeroes a variable tensor's bytes, but sets int8 state to its zero point
        fill = q.zero_point[0] if self.dtype(i) == "int8" and q is not None else 0
        self.states[int(i)] = KeptValue(self.names[int(i)], TensorType(self.dtype(i), self.shape(i),
                                                                        self.value_quant(i)), fill)
        return self.names[int(i)]

    def next_state(self, i: int) -> str:
        """The value variable tensor i holds when the call ends (what the next call starts from)."""
        self.states[int(i)].write = self.fresh(f"{self.names[int(i)]}_next")
        return self.states[int(i)].write

    def add_constant(self, hint: str, data: np.ndarray) -> str:
        name = numbered(hint, set(self.constants) | set(self.names.values()))
        self.constants[name] = Constant(name, np.array(data, order="C"), "TFLite import", self.loc)
        return name

    def set_constant(self, i: int, data: np.ndarray) -> None:
        """Tensor i computed at build time (a shape operator folded): a constant under its own name
        (a float16 one only for the operators that read it at build time, not in the graph)."""
        self.folded[int(i)] = data
        if self.tensor(i).Type() in STORED_ONLY_TYPES:
            return
        name = self.names[int(i)]
        self.constants[name] = Constant(name, np.array(data, order="C"), f"{self.where} tensor "
                                        f"'{self.original(i)}' (computed at build time)", self.loc)

    def fresh(self, hint: str) -> str:
        """A new value name between the nodes one operator becomes."""
        taken = set(self.constants) | set(self.names.values()) | {o for n in self.nodes for o in n.outputs}
        return numbered(hint, taken)

    def required_quant(self, i: int) -> Quant:
        """Tensor i's quantization, which the operator reading it needs."""
        q = self.quant(i)
        if q is None:
            raise GraphError(self.loc, f"tensor '{self.original(i)}' is not quantized",
                             "an integer operator reads quantized tensors (a full-integer model)")
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
        """A quantized output's fused activation as the clamp attributes of its node."""
        dtype = self.integer_dtype(out)
        scale, zp = self.scale_zp(out)
        lo, hi = fp.activation_range(ACTIVATIONS.get(code, "none"), scale, zp, dtype)
        return {"act_min": lo, "act_max": hi}

    def emit(self, op: str, inputs, outputs, attrs: Mapping) -> None:
        """A node of the operator being converted, named after it (conv_2d_3, then conv_2d_3_2, ...)
        so that a later error or a kernel of the generated code points back to the operator."""
        loc = self.loc
        name = numbered(self.operator, {n.name for n in self.nodes})
        self.nodes.append(NodeSpec(op, name, tuple(inputs), tuple(outputs), dict(attrs), loc, loc,
                                   tuple(loc for _ in inputs), tuple(loc for _ in outputs)))

    def emit_activated(self, op: str, inputs, y: int, attrs: Mapping, code: int) -> None:
        """A float node followed by its fused activation (a clamp of its output)."""
        if code == 0:
            self.emit(op, inputs, [self.names[y]], attrs)
            return
        if code not in FLOAT_CLAMPS:
            raise Unsupported(f"fused activation {code} (TANH or SIGN_BIT)")
        raw = self.fresh(f"{self.names[y]}_raw")
        self.emit(op, inputs, [raw], attrs)
        lo, hi = FLOAT_CLAMPS[code]
        self.emit("Clip", [raw], [self.names[y]], {"min": lo, **({"max": hi} if hi is not None else {})})

    def pads(self, x: int, kh: int, kw: int, opts, dil=(1, 1)) -> list[int]:
        """ONNX pads [top, left, bottom, right] of a window over NHWC tensor x."""
        if opts.Padding() == 1:  # VALID
            return [0, 0, 0, 0]
        _, h, w, _ = self.shape(x)
        top, bottom = same_pads(h, kh, opts.StrideH(), dil[0])
        left, right = same_pads(w, kw, opts.StrideW(), dil[1])
        return [top, left, bottom, right]

    def pool_window(self, x: int, op) -> tuple[dict, int]:
        """A pooling operator's window over NHWC tensor x as attributes, and its fused activation code."""
        opts = options(op, "Pool2DOptions")
        k = (opts.FilterHeight(), opts.FilterWidth())
        return ({"kernel_shape": list(k), "strides": [opts.StrideH(), opts.StrideW()],
                 "pads": self.pads(x, k[0], k[1], opts)}, opts.FusedActivationFunction())

    def int64(self, hint: str, values) -> str:
        """An int64 constant (shapes, axes, pads: the operands ONNX primitives take as inputs)."""
        return self.add_constant(hint, np.asarray(values, np.int64))
