"""Small .tflite flatbuffers written with the `tflite` package's schema builders, for operator
tests that need no TensorFlow: one builtin operator from graph input to graph output."""
from __future__ import annotations

import importlib

import flatbuffers
import numpy as np

TYPES = {"int8": 9, "int16": 7, "uint8": 3, "int32": 2, "float32": 0}


def _schema(name: str):
    return importlib.import_module(f"tflite.{name}")


def _quant(b: flatbuffers.Builder, scale: float, zero_point: int) -> int:
    Q = _schema("QuantizationParameters")
    scales = b.CreateNumpyVector(np.array([scale], np.float32))
    zps = b.CreateNumpyVector(np.array([zero_point], np.int64))
    Q.Start(b)
    Q.AddScale(b, scales)
    Q.AddZeroPoint(b, zps)
    return Q.End(b)


def _tensor(b: flatbuffers.Builder, name: str, dtype: str, shape, scale: float, zero_point: int) -> int:
    T = _schema("Tensor")
    name_off = b.CreateString(name)
    shape_off = b.CreateNumpyVector(np.array(shape, np.int32))
    quant = _quant(b, scale, zero_point)
    T.Start(b)
    T.AddShape(b, shape_off)
    T.AddType(b, TYPES[dtype])
    T.AddBuffer(b, 0)
    T.AddName(b, name_off)
    T.AddQuantization(b, quant)
    return T.End(b)


def _vector(b: flatbuffers.Builder, offsets) -> int:
    b.StartVector(4, len(offsets), 4)
    for off in reversed(offsets):
        b.PrependUOffsetTRelative(off)
    return b.EndVector()


def single_operator(builtin: int, dtype: str, shape, x_quant: tuple[float, int],
                    y_quant: tuple[float, int], op_inputs=(0,), op_outputs=(1,)) -> bytes:
    """A model computing y = OP(x) for an operator without options (LOGISTIC, TANH, ...); the
    operator's tensor indices can be changed (a hostile model)."""
    b = flatbuffers.Builder(1024)
    tensors = [_tensor(b, "x", dtype, shape, *x_quant), _tensor(b, "y", dtype, shape, *y_quant)]
    O = _schema("Operator")
    ins, outs = b.CreateNumpyVector(np.array(op_inputs, np.int32)), b.CreateNumpyVector(np.array(op_outputs, np.int32))
    O.Start(b)
    O.AddOpcodeIndex(b, 0)
    O.AddInputs(b, ins)
    O.AddOutputs(b, outs)
    op = O.End(b)
    S = _schema("SubGraph")
    tensors_off, ops_off = _vector(b, tensors), _vector(b, [op])
    g_in, g_out = b.CreateNumpyVector(np.array([0], np.int32)), b.CreateNumpyVector(np.array([1], np.int32))
    S.Start(b)
    S.AddTensors(b, tensors_off)
    S.AddInputs(b, g_in)
    S.AddOutputs(b, g_out)
    S.AddOperators(b, ops_off)
    graph = S.End(b)
    C = _schema("OperatorCode")
    C.Start(b)
    C.AddDeprecatedBuiltinCode(b, min(builtin, 127))
    C.AddBuiltinCode(b, builtin)
    C.AddVersion(b, 1)
    code = C.End(b)
    B = _schema("Buffer")
    B.Start(b)
    empty = B.End(b)
    M = _schema("Model")
    codes, graphs, buffers = _vector(b, [code]), _vector(b, [graph]), _vector(b, [empty])
    M.Start(b)
    M.AddVersion(b, 3)
    M.AddOperatorCodes(b, codes)
    M.AddSubgraphs(b, graphs)
    M.AddBuffers(b, buffers)
    b.Finish(M.End(b), file_identifier=b"TFL3")
    return bytes(b.Output())
