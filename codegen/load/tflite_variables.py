"""TFLite's resource variables and CALL_ONCE, as TensorFlow's converter writes a stateful model for
TFLite Micro: CALL_ONCE runs an init subgraph on the first invocation, which assigns each variable
(VAR_HANDLE names it) its starting value; each invocation then reads (READ_VARIABLE) and assigns
(ASSIGN_VARIABLE) them, and what it assigns last is what the next invocation reads.

The init subgraph is run at build time: it may only assign constants. A variable the model reads
before assigning becomes a graph State (see ir.State: static storage of the generated code, not the
workspace) starting from that constant, which must hold one value throughout (as the zeros or the
zero point a model starts from do); a variable it only reads is that constant.
"""
from __future__ import annotations

import numpy as np

from tinsmith.load.tflite_reader import KeptValue, Reader, Unsupported, builtin_code, options
from tinsmith.ir import TensorType

INIT_OPERATORS = ("VAR_HANDLE", "ASSIGN_VARIABLE")


def _variable_name(op) -> str:
    """The variable a VAR_HANDLE stands for: its container and shared name."""
    opts = options(op, "VarHandleOptions")
    container, shared = (v.decode("utf-8", "replace") if v else "" for v in (opts.Container(), opts.SharedName()))
    return f"{container}/{shared}" if container else shared


def call_once(r: Reader, op, inputs, outputs) -> None:
    """Run the init subgraph now: record what it assigns to each variable."""
    from tflite.utils import opcode2name
    index = int(options(op, "CallOnceOptions").InitSubgraphIndex())
    if not 0 < index < r.model.SubgraphsLength():
        raise Unsupported(f"an init subgraph {index} the model does not hold (it has {r.model.SubgraphsLength()})")
    init = r.model.Subgraphs(index)
    body = Reader(r.path, r.where, r.model, init)
    handles: dict[int, str] = {}
    for k in range(init.OperatorsLength()):
        inner = init.Operators(k)
        code = r.model.OperatorCodes(inner.OpcodeIndex())
        name = opcode2name(builtin_code(code))
        ins, outs = [int(i) for i in inner.InputsAsNumpy()], [int(i) for i in inner.OutputsAsNumpy()]
        if name not in INIT_OPERATORS:
            raise Unsupported(f"an init subgraph that computes ({name}, operator {k} of subgraph {index}); Tinsmith "
                              f"runs one that assigns constants to variables")
        if name == "VAR_HANDLE":
            handles[outs[0]] = _variable_name(inner)
        elif ins[0] not in handles:
            raise Unsupported(f"operator {k} of subgraph {index} assigns to a tensor no VAR_HANDLE made")
        else:
            r.initial[handles[ins[0]]] = body.constant_data(ins[1], "variable's starting value")


def var_handle(r: Reader, op, inputs, outputs) -> None:
    r.handles[int(outputs[0])] = _variable_name(op)


def _variable(r: Reader, handle: int) -> str:
    if int(handle) not in r.handles:
        raise Unsupported(f"a resource tensor '{r.original(handle)}' no VAR_HANDLE made")
    return r.handles[int(handle)]


def read_variable(r: Reader, op, inputs, outputs) -> None:
    """The variable's value now: what this invocation assigned it last, else what the last
    invocation left (a kept value, named after this operator's output)."""
    name, y = _variable(r, inputs[0]), int(outputs[0])
    if name in r.variables:
        r.emit("Identity", [r.variables[name]], [r.names[y]], {})
        return
    r.states[("variable", name)] = KeptValue(r.names[y], TensorType(r.dtype(y), r.shape(y), r.value_quant(y)),
                                             _fill(r, name, y))
    r.variables[name] = r.names[y]


def _fill(r: Reader, name: str, y: int) -> float:
    """The variable's value before the first invocation: what the init subgraph assigned (zeros if
    none did), which must be one value throughout."""
    start = r.initial.get(name)
    if start is None:
        return 0.0
    if start.shape != r.shape(y) or str(start.dtype) != r.dtype(y):
        raise Unsupported(f"variable '{name}' starts as {start.dtype}{list(start.shape)} but is read as "
                          f"{r.dtype(y)}{list(r.shape(y))}")
    values = np.unique(start)
    if values.size > 1:
        raise Unsupported(f"variable '{name}' starts with different values in different elements (Tinsmith "
                          f"starts a kept value from one value)")
    return float(values[0]) if values.size else 0.0


def assign_variable(r: Reader, op, inputs, outputs) -> None:
    """The value later reads of this invocation see, and the next invocation starts from."""
    name, value = _variable(r, inputs[0]), r.value(inputs[1])
    r.variables[name] = value
    kept = r.states.get(("variable", name))
    if kept is not None:  # (assigned before any read: the next invocation assigns it again first)
        if kept.type.shape != r.shape(inputs[1]) or kept.type.dtype != r.dtype(inputs[1]):
            raise Unsupported(f"variable '{name}' is read as {kept.type} but assigned "
                              f"{r.dtype(inputs[1])}{list(r.shape(inputs[1]))}")
        kept.write = r.fresh(f"{kept.read}_next")
        r.emit("Identity", [value], [kept.write], {})
