"""Small .tflite flatbuffers written with the `tflite` package's schema builders, for tests and the
TFLite conformance models that need no TensorFlow: tensors (named or not, constant or not,
quantized or not), builtin operators with their options, custom operators by their code.

    model([Tensor("x", "float32", [1, 4]), Tensor("y", "float32", [1, 4])],
          [Op("RELU", [0], [1])], inputs=[0], outputs=[1])
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import flatbuffers
from flatbuffers import flexbuffers
import numpy as np

TYPES = {"float32": 0, "int32": 2, "uint8": 3, "int64": 4, "bool": 6, "int16": 7, "int8": 9, "float16": 1,
         "uint64": 12, "resource": 13, "uint32": 15, "uint16": 16}


def _schema(name: str):
    return importlib.import_module(f"tflite.{name}")


@dataclass(frozen=True)
class Tensor:
    """A tensor: `data` makes it a constant; `quant` is (scales, zero points) or (scale, zero point);
    a name of None leaves the name out of the file."""

    name: str | None
    dtype: str
    shape: Sequence[int]
    data: np.ndarray | None = None
    quant: tuple | None = None
    axis: int = 0  # the quantized dimension of per-channel scales
    variable: bool = False  # a variable tensor (state that persists between invocations)
    # a sparse constant (`data`: the kept values in traversal order): (traversal order, block map,
    # one entry per level: a dense size, or (array segments, array indices) of a SPARSE_CSR level)
    sparsity: tuple | None = None
    signature: Sequence[int] | None = None  # shape_signature: -1 for a size set at run time


@dataclass(frozen=True)
class Op:
    """An operator: a builtin by name (or number), or a custom one by its code; options as
    (options table name, {field: value}), e.g. ("Conv2DOptions", {"Padding": 1})."""

    code: str | int
    inputs: Sequence[int]
    outputs: Sequence[int]
    options: tuple[str, Mapping] | None = None
    custom: str | bytes | None = None
    # a custom operator's options: a mapping (written as a FlexBuffers map), or bytes as they are
    custom_options: Mapping | bytes | None = None


def builtin_code(code: str | int) -> int:
    return code if isinstance(code, int) else getattr(importlib.import_module("tflite").BuiltinOperator, code)


def _vector(b: flatbuffers.Builder, offsets) -> int:
    b.StartVector(4, len(offsets), 4)
    for off in reversed(offsets):
        b.PrependUOffsetTRelative(off)
    return b.EndVector()


def _bytes(b: flatbuffers.Builder, data: bytes) -> int:
    """A byte vector aligned to 16 bytes, as TFLite's own writer aligns buffers."""
    b.StartVector(1, len(data), 16)
    b.head = b.head - len(data)
    b.Bytes[b.head:b.head + len(data)] = data
    return b.EndVector()


def _quant(b: flatbuffers.Builder, quant, axis: int) -> int:
    Q = _schema("QuantizationParameters")
    scales = b.CreateNumpyVector(np.atleast_1d(np.asarray(quant[0], np.float32)))
    zps = b.CreateNumpyVector(np.atleast_1d(np.asarray(quant[1], np.int64)))
    Q.Start(b)
    Q.AddScale(b, scales)
    Q.AddZeroPoint(b, zps)
    Q.AddQuantizedDimension(b, axis)
    return Q.End(b)


def _int32_vector(b: flatbuffers.Builder, values) -> int:
    V = _schema("Int32Vector")
    vector = b.CreateNumpyVector(np.asarray(values, np.int32))
    V.Start(b)
    V.AddValues(b, vector)
    return V.End(b)


def _sparsity(b: flatbuffers.Builder, sparsity: tuple) -> int:
    order, block_map, levels = sparsity
    D, S = _schema("DimensionMetadata"), _schema("SparsityParameters")
    metadata = []
    for level in levels:
        vectors = None if isinstance(level, int) else [_int32_vector(b, v) for v in level]
        D.Start(b)
        if vectors is None:
            D.AddFormat(b, 0)
            D.AddDenseSize(b, level)
        else:
            D.AddFormat(b, 1)
            D.AddArraySegmentsType(b, 1)
            D.AddArraySegments(b, vectors[0])
            D.AddArrayIndicesType(b, 1)
            D.AddArrayIndices(b, vectors[1])
        metadata.append(D.End(b))
    order_off = b.CreateNumpyVector(np.asarray(order, np.int32))
    block_off = b.CreateNumpyVector(np.asarray(block_map, np.int32)) if block_map else None
    metadata_off = _vector(b, metadata)
    S.Start(b)
    S.AddTraversalOrder(b, order_off)
    if block_off is not None:
        S.AddBlockMap(b, block_off)
    S.AddDimMetadata(b, metadata_off)
    return S.End(b)


def _tensor(b: flatbuffers.Builder, t: Tensor, buffer: int) -> int:
    T = _schema("Tensor")
    name = b.CreateString(t.name) if t.name is not None else None
    shape = b.CreateNumpyVector(np.array(t.shape, np.int32))
    quant = _quant(b, t.quant, t.axis) if t.quant is not None else None
    sparsity = _sparsity(b, t.sparsity) if t.sparsity is not None else None
    signature = b.CreateNumpyVector(np.array(t.signature, np.int32)) if t.signature is not None else None
    T.Start(b)
    T.AddShape(b, shape)
    T.AddType(b, TYPES[t.dtype])
    T.AddBuffer(b, buffer)
    if name is not None:
        T.AddName(b, name)
    if quant is not None:
        T.AddQuantization(b, quant)
    if t.variable:
        T.AddIsVariable(b, True)
    if sparsity is not None:
        T.AddSparsity(b, sparsity)
    if signature is not None:
        T.AddShapeSignature(b, signature)
    return T.End(b)


def _options(b: flatbuffers.Builder, options: tuple[str, Mapping]) -> tuple[int, int]:
    """(union type, table) of an operator's builtin options."""
    cls_name, fields = options
    M = _schema(cls_name)
    vectors = {k: b.CreateNumpyVector(np.asarray(v, np.int32)) for k, v in fields.items()
               if isinstance(v, (list, tuple, np.ndarray))}
    vectors.update({k: b.CreateString(v) for k, v in fields.items() if isinstance(v, str)})
    M.Start(b)
    for k, v in fields.items():
        getattr(M, f"Add{k}")(b, vectors.get(k, v))
    table = M.End(b)
    return getattr(importlib.import_module("tflite").BuiltinOptions, cls_name), table


def _operator(b: flatbuffers.Builder, op: Op, opcode_index: int) -> int:
    O = _schema("Operator")
    ins = b.CreateNumpyVector(np.array(op.inputs, np.int32))
    outs = b.CreateNumpyVector(np.array(op.outputs, np.int32))
    options = _options(b, op.options) if op.options else None
    raw = op.custom_options
    custom = None if raw is None else b.CreateByteVector(
        bytes(raw) if isinstance(raw, (bytes, bytearray)) else bytes(flexbuffers.Dumps(dict(raw))))
    O.Start(b)
    O.AddOpcodeIndex(b, opcode_index)
    O.AddInputs(b, ins)
    O.AddOutputs(b, outs)
    if options:
        O.AddBuiltinOptionsType(b, options[0])
        O.AddBuiltinOptions(b, options[1])
    if custom is not None:
        O.AddCustomOptions(b, custom)  # CustomOptionsFormat FLEXBUFFERS is the default (0)
    return O.End(b)


def _opcode(b: flatbuffers.Builder, code: int, custom: str | None) -> int:
    C = _schema("OperatorCode")
    custom_off = b.CreateString(custom) if custom is not None else None
    C.Start(b)
    C.AddDeprecatedBuiltinCode(b, min(code, 127))
    C.AddBuiltinCode(b, code)
    if custom_off is not None:
        C.AddCustomCode(b, custom_off)
    C.AddVersion(b, 1)
    return C.End(b)


def _subgraph(b: flatbuffers.Builder, tensors, ops, inputs, outputs, kinds: list, data: list[Tensor]) -> int:
    """One subgraph; its constant tensors' data joins `data` (buffer k + 1 holds data[k])."""
    tensor_offsets = []
    for t in tensors:
        if t.data is not None:
            data.append(t)
        tensor_offsets.append(_tensor(b, t, len(data) if t.data is not None else 0))
    for op in ops:
        if (builtin_code(op.code), op.custom) not in kinds:
            kinds.append((builtin_code(op.code), op.custom))
    op_offsets = [_operator(b, op, kinds.index((builtin_code(op.code), op.custom))) for op in ops]
    S = _schema("SubGraph")
    tensors_off, ops_off = _vector(b, tensor_offsets), _vector(b, op_offsets)
    g_in, g_out = b.CreateNumpyVector(np.array(inputs, np.int32)), b.CreateNumpyVector(np.array(outputs, np.int32))
    S.Start(b)
    S.AddTensors(b, tensors_off)
    S.AddInputs(b, g_in)
    S.AddOutputs(b, g_out)
    S.AddOperators(b, ops_off)
    return S.End(b)


def model(tensors: Sequence[Tensor], ops: Sequence[Op], inputs: Sequence[int], outputs: Sequence[int],
          subgraphs: Sequence[tuple] = ()) -> bytes:
    """A model whose first subgraph is (tensors, ops, inputs, outputs) and whose further subgraphs
    (the bodies of CALL_ONCE, IF, WHILE) are `subgraphs`, each such a tuple; buffer 0 is the empty
    one TFLite reserves."""
    b = flatbuffers.Builder(1024)
    B = _schema("Buffer")
    buffers, data, kinds = [], [], []
    graphs = [_subgraph(b, *g, kinds, data) for g in [(tensors, ops, inputs, outputs), *subgraphs]]
    codes = [_opcode(b, code, custom) for code, custom in kinds]
    for t in [None] + data:
        raw = _bytes(b, np.ascontiguousarray(t.data, np.dtype(t.dtype).newbyteorder("<")).tobytes()) \
            if t is not None else None
        B.Start(b)
        if raw is not None:
            B.AddData(b, raw)
        buffers.append(B.End(b))
    M = _schema("Model")
    codes_off, graphs, buffers_off = _vector(b, codes), _vector(b, graphs), _vector(b, buffers)
    M.Start(b)
    M.AddVersion(b, 3)
    M.AddOperatorCodes(b, codes_off)
    M.AddSubgraphs(b, graphs)
    M.AddBuffers(b, buffers_off)
    b.Finish(M.End(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def conv_options(padding: int, stride: int = 1, dilation: int = 1, act: int = 0, depth_multiplier=None):
    """The options of a CONV_2D (or, with a depth multiplier, a DEPTHWISE_CONV_2D): padding 0 SAME,
    1 VALID; the same stride and dilation along both axes; a fused activation code."""
    opts = {"Padding": padding, "StrideH": stride, "StrideW": stride, "DilationHFactor": dilation,
            "DilationWFactor": dilation, "FusedActivationFunction": act}
    if depth_multiplier is None:
        return ("Conv2DOptions", opts)
    return ("DepthwiseConv2DOptions", {**opts, "DepthMultiplier": depth_multiplier})


def single_operator(builtin: int, dtype: str, shape, x_quant: tuple[float, int] | None,
                    y_quant: tuple[float, int] | None, op_inputs=(0,), op_outputs=(1,), y_dtype: str | None = None,
                    names=("x", "y")) -> bytes:
    """A model computing y = OP(x) for an operator without options (LOGISTIC, TANH, ...); the
    operator's tensor indices can be changed (a hostile model)."""
    tensors = [Tensor(names[0], dtype, shape, quant=x_quant), Tensor(names[1], y_dtype or dtype, shape, quant=y_quant)]
    return model(tensors, [Op(builtin, op_inputs, op_outputs)], [0], [1])
