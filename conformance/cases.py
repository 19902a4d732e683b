"""The ONNX backend node test cases, as Tinsmith sees them: which operator each one tests,
whether it is a float32 case, and the model Tinsmith is asked to compile.

Attribution: a node test case holds one node, and its operator is that node's op type (with
its domain when it is not the default one). An `_expanded` case (`test_X_expanded`, or
`test_X_expanded_verN`) holds the function body of the operator that `test_X` tests, so it is
counted under that operator, not under the ops its body uses.

Build-time operands: the node tests feed every operand as a graph input, including shapes,
axes, pads, indices and scales that real models hold as initializers. Tinsmith compiles
static graphs whose inputs are float32, so before importing a case the harness turns some
graph inputs into initializers holding the data set's values (`frozen_inputs`):
  1. inputs that a primitive declares it needs at build time (`constant_inputs` in
     codegen/ops, e.g. Reshape's shape, Slice's starts, Resize's scales), whatever their type;
  2. integer and boolean inputs (indices, conditions, exponents), but only when a graph input
     is left to compute with afterwards: a case whose every input would be frozen this way
     would test the constant folder alone, so it stays as written (and is unsupported).
"""
from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

DEFAULT_DOMAINS = ("", "ai.onnx")
EXPANDED = re.compile(r"_expanded(_ver\d+)?$")
# Element types a float32 case may hold besides float32: integer and boolean operands.
OPERAND_DTYPES = frozenset(np.dtype(t) for t in (np.bool_, np.int8, np.int16, np.int32, np.int64,
                                                 np.uint8, np.uint16, np.uint32, np.uint64))
FLOAT32 = np.dtype(np.float32)


@dataclass(frozen=True, eq=False)
class Case:
    """One node test case: name, the operator it tests, its model and data sets, tolerances."""

    name: str
    op: str
    model: Any  # onnx.ModelProto
    data_sets: tuple[tuple[tuple[Any, ...], tuple[Any, ...]], ...]  # (inputs, expected outputs)
    rtol: float
    atol: float
    expanded: bool
    float32: bool  # its data is float32 with integer/boolean operands: counts for the op's tally
    # for an `_expanded` case, the tested node's op type and input names (its graph inputs keep
    # those names), so the operands that op needs at build time are frozen in its body too
    tested: tuple[str, tuple[str, ...]] | None = None


@dataclass(frozen=True, eq=False)
class Prepared:
    """The model to compile for a case, with the graph inputs it kept and those it froze."""

    model: Any  # onnx.ModelProto
    runtime_inputs: tuple[int, ...]  # positions (in the case's inputs) still fed at run time
    frozen_inputs: tuple[str, ...] = field(default=())  # ONNX names of inputs made initializers


def as_array(value: Any) -> np.ndarray | None:
    """A data set entry as a NumPy array (TensorProto and scalars too); None for sequences,
    optionals and maps, which Tinsmith does not compute with."""
    from onnx import TensorProto, numpy_helper
    if isinstance(value, TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, (np.generic, int, float, bool)):
        return np.asarray(value)
    return None


def _op_label(node) -> str:
    domain = "" if node.domain in DEFAULT_DOMAINS else node.domain
    return f"{domain}.{node.op_type}" if domain else node.op_type


def _is_float32_case(data_sets) -> bool:
    dtypes = set()
    for inputs, outputs in data_sets:
        for value in (*inputs, *outputs):
            array = as_array(value)
            if array is None:
                return False
            dtypes.add(array.dtype)
    return FLOAT32 in dtypes and dtypes <= OPERAND_DTYPES | {FLOAT32}


def load_cases(select: str | None = None) -> list[Case]:
    """Every node test case of the installed onnx package (those whose name contains `select`,
    if given), in the package's order."""
    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings():  # the generators overflow casts on purpose
        warnings.simplefilter("ignore")
        collected = collect_testcases(None)
    single = {c.name: c.model.graph.node[0] for c in collected
              if not EXPANDED.search(c.name) and len(c.model.graph.node) == 1}
    ops = {name: _op_label(node) for name, node in single.items()}
    cases = []
    for c in collected:
        if select and select not in c.name:
            continue
        base = EXPANDED.sub("", c.name)
        op = ops.get(base) or (_op_label(c.model.graph.node[0]) if c.model.graph.node else "?")
        data_sets = tuple((tuple(i), tuple(o)) for i, o in c.data_sets)
        node = single.get(base) if base != c.name else None
        tested = (node.op_type, tuple(node.input)) if node is not None and node.domain in DEFAULT_DOMAINS else None
        cases.append(Case(c.name, op, c.model, data_sets, c.rtol, c.atol, base != c.name,
                          _is_float32_case(data_sets), tested))
    return cases


def build_time_inputs(model, constant_inputs: dict[str, Sequence[int]],
                      tested: tuple[str, tuple[str, ...]] | None = None) -> set[str]:
    """Graph inputs that some node reads at a position its primitive needs at build time (or,
    in an `_expanded` case, that the tested node reads there)."""
    graph_inputs = {v.name for v in model.graph.input}
    nodes = [(node.op_type, tuple(node.input)) for node in model.graph.node if node.domain in DEFAULT_DOMAINS]
    names = set()
    for op, inputs in nodes + ([tested] if tested else []):
        for i in constant_inputs.get(op, ()):
            if i < len(inputs) and inputs[i] in graph_inputs:
                names.add(inputs[i])
    return names


def prepare(case: Case, constant_inputs: dict[str, Sequence[int]]) -> Prepared:
    """The case's model with its build-time and integer/boolean operands frozen (see above)."""
    from onnx import numpy_helper
    model = case.model
    inputs = [v.name for v in model.graph.input]
    arrays = [as_array(x) for x in case.data_sets[0][0]] if len(case.data_sets) == 1 else [None] * len(inputs)
    # Several data sets could disagree on a frozen operand: then nothing is frozen.
    build_time = build_time_inputs(model, constant_inputs, case.tested)
    frozen = {n for n, a in zip(inputs, arrays) if n in build_time and a is not None}
    operands = {n for n, a in zip(inputs, arrays)
                if n not in frozen and a is not None and a.dtype in OPERAND_DTYPES}
    if len(frozen | operands) < len(inputs):  # something is left to compute with
        frozen |= operands
    if not frozen:
        return Prepared(model, tuple(range(len(inputs))))
    copy = type(model)()
    copy.CopyFrom(model)
    kept = [v for v in copy.graph.input if v.name not in frozen]
    del copy.graph.input[:]
    copy.graph.input.extend(kept)
    for name, array in zip(inputs, arrays):
        if name in frozen:
            copy.graph.initializer.append(numpy_helper.from_array(np.asarray(array), name))
    runtime = tuple(i for i, n in enumerate(inputs) if n not in frozen)
    return Prepared(copy, runtime, tuple(n for n in inputs if n in frozen))
