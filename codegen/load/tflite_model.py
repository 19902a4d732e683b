"""Read a TensorFlow Lite flatbuffer (.tflite) into a GraphSpec.

The `tflite` package (the flatbuffer schema's generated Python readers) reads the file; each
builtin operator of the first subgraph goes through its registration in tflite_operators.py:
integer operators become codegen/ops/quantized.py's primitives (tflite_quantized.py), float32 ones
the ONNX-semantics primitives (tflite_float.py), and operators that only move elements either
(tflite_tensor_ops.py). Tensors keep TFLite's NHWC layout and their names (made identifiers;
unnamed ones are named after their index). Every operator it cannot map is reported at once,
by index and name; a damaged file is an error, never a traceback.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np

from tinsmith.errors import GraphError, SourceLoc
from tinsmith.files import irregular_file
from tinsmith.ir import Constant, State, TensorType
from tinsmith.load.build_info import display_path, model_graph_name
from tinsmith.load.graph_file import GraphSpec, ValueSpec
from tinsmith.load.onnx_model import unique_names
from tinsmith.load.tflite_operators import ANY, CUSTOM_OPERATORS, OPERATORS, custom_operator_problem
from tinsmith.load.tflite_reader import STORED_ONLY_TYPES, Reader, Unsupported, builtin_code, tflite_schema

TFLITE_SUFFIXES = (".tflite",)
# what a converter raises on operands that do not fit (wrong rank, missing constants)
_tflite = tflite_schema  # (validate.py reads the schema through this name)
_OPERAND_ERRORS = (ValueError, IndexError, TypeError, KeyError, ZeroDivisionError, OverflowError)


@dataclass(frozen=True)
class TfliteModel:
    """An imported model: the GraphSpec and the original tensor names of renamed values."""

    spec: GraphSpec
    values: Mapping[str, str]  # identifier -> original TFLite tensor name, where they differ


def read_tflite(path: str | Path) -> TfliteModel:
    """Read a .tflite file; every problem is a GraphError at the file."""
    tfl = tflite_schema()
    path = Path(path)
    where = display_path(path)
    loc = SourceLoc.whole_file(where)
    problem = irregular_file(path)
    if problem:
        raise GraphError(loc, f"cannot read model file: {problem}")
    try:
        buf = path.read_bytes()
        model = tfl.Model.GetRootAsModel(buf, 0)
        graph = model.Subgraphs(0) if model.SubgraphsLength() > 0 else None
    except FileNotFoundError:
        raise GraphError(loc, "cannot read model file: No such file or directory") from None
    except OSError as e:
        raise GraphError(loc, f"cannot read model file: {e.strerror or e}") from None
    except Exception as e:
        raise GraphError(loc, f"not a valid TFLite model ({type(e).__name__})") from None
    if graph is None:
        raise GraphError(loc, "not a valid TFLite model: it has no subgraph")
    try:
        return _read_graph(path, where, model, graph)
    except GraphError:
        raise
    except Exception as e:
        if not _raised_by_the_flatbuffer_readers(e):
            raise
        raise GraphError(loc, f"not a valid TFLite model: the flatbuffer holds an offset, length or value its "
                         f"schema does not allow ({type(e).__name__})") from None


def _raised_by_the_flatbuffer_readers(e: Exception) -> bool:
    """Whether `e` comes from the flatbuffers runtime or the schema's readers (the `tflite` package):
    the file lies about its layout. The readers are lazy, so this can happen at any read; errors of
    the importer's own code stay errors."""
    import traceback

    import flatbuffers
    frames = traceback.extract_tb(e.__traceback__)
    readers = (str(Path(flatbuffers.__file__).parent), str(Path(tflite_schema().__file__).parent))
    return any(f.filename.startswith(readers) for f in frames[-3:])


def _indices(vector) -> list[int]:
    """A vector of tensor indices as ints (the readers return 0 for a vector the file leaves out)."""
    return [int(i) for i in vector] if isinstance(vector, np.ndarray) else []


_OUTPUTS = {0: "no output", 1: "one output"}


def _operands(r: Reader, k: int, name: str, op, need: int, need_outputs: int = 1) -> tuple[list[int], list[int]]:
    """Operator k's input and output tensor indices, each checked against the model."""
    inputs, outputs = _indices(op.InputsAsNumpy()), _indices(op.OutputsAsNumpy())
    if len(inputs) < need or len(outputs) < need_outputs or any(i < 0 for i in inputs[:need]):
        raise GraphError(r.loc, f"operator {k} ({name}) has {len(inputs)} inputs and {len(outputs)} outputs; it "
                         f"needs at least {need} inputs and {_OUTPUTS.get(need_outputs, f'{need_outputs} outputs')}")
    for i in [i for i in inputs if i != -1] + outputs:
        r.tensor(i)
    return inputs, outputs


def operator_names(r: Reader, model, graph) -> list[str]:
    """Each operator's builtin name, or CUSTOM:code for a custom operator."""
    from tflite.utils import opcode2name
    names = []
    for k in range(graph.OperatorsLength()):
        op = graph.Operators(k)
        if op.OpcodeIndex() >= model.OperatorCodesLength():
            raise GraphError(r.loc, f"operator {k} refers to operator code {op.OpcodeIndex()}, but the model has "
                             f"{model.OperatorCodesLength()}")
        oc = model.OperatorCodes(op.OpcodeIndex())
        code = builtin_code(oc)
        try:
            name = opcode2name(code)
        except Exception:  # (a number the schema does not know)
            name = f"builtin operator {code}"
        if name == "CUSTOM":
            custom = oc.CustomCode()
            name = f"CUSTOM:{custom.decode('utf-8', 'replace') if custom else ''}"
        names.append(name)
    return names


def _refuse_unknown_operators(r: Reader, names: list[str]) -> None:
    """One error naming every operator without a registration, with the operators that have it."""
    customs = [f"operator {k}: {custom_operator_problem(n.partition(':')[2])}"
               for k, n in enumerate(names) if n.startswith("CUSTOM:") and n not in CUSTOM_OPERATORS]
    where: dict[str, list[int]] = {}
    for k, n in enumerate(names):
        if n not in OPERATORS and not n.startswith("CUSTOM:"):
            where.setdefault(n, []).append(k)
    if not where and not customs:
        return
    builtins = [f"{n} (operator{'s' * (len(ks) > 1)} {', '.join(map(str, ks))})" for n, ks in sorted(where.items())]
    parts = ([f"unsupported TFLite operator{'s' * (len(builtins) > 1)}: {', '.join(builtins)}"] if builtins else []) \
        + customs
    raise GraphError(r.loc, parts[0], f"supported builtin operators: {', '.join(sorted(OPERATORS))}",
                     more=tuple(parts[1:]))


def names_of_tensors(r: Reader, graph) -> list[str]:
    """Give every tensor of `graph` its identifier (r.names); returns their original names."""
    originals = [r.original(i) for i in range(graph.TensorsLength())]
    # the converter names a fused tensor after every op it absorbed ("a/Relu;a/BiasAdd;..."): the
    # first is enough for an identifier
    short = [n.split(";")[0] for n in originals]
    uses = Counter(short)
    keys = [f"{s}_{i}" if uses[s] > 1 else s for i, s in enumerate(short)]
    ids = unique_names(keys, "t")
    r.names = {i: ids[key] for i, key in enumerate(keys)}
    return originals


def convert_operator(r: Reader, k: int, name: str, op) -> str | None:
    """Convert operator k; returns why it cannot be (an unsupported form), or None."""
    rule = OPERATORS[name] if name in OPERATORS else CUSTOM_OPERATORS[name]
    need = rule.min_inputs if rule.typed_by is None else max(rule.min_inputs, rule.typed_by + 1)
    inputs, outputs = _operands(r, k, name, op, need, rule.min_outputs)
    dtype = ANY if rule.typed_by is None else r.element_type(inputs[rule.typed_by])
    if dtype not in rule.converters and dtype in STORED_ONLY_TYPES.values():
        r.dtype(inputs[rule.typed_by])  # (float16 outside the operators that fold it: the type is named)
    if dtype not in rule.converters:
        return f"operator {k} ({name}) on {dtype} data (Tinsmith supports {name} on {', '.join(rule.types)})"
    r.operator = f"{name.partition(':')[2] or name}_{k}".lower()  # CUSTOM:SignalWindow -> signalwindow_k
    try:
        rule.converters[dtype](r, op, inputs, outputs)
    except Unsupported as e:
        return f"operator {k} ({name}): {e}"
    except GraphError as e:
        raise GraphError(e.loc, f"operator {k} ({name}): {e.message}", e.hint) from None
    except _OPERAND_ERRORS as e:
        if _raised_by_the_flatbuffer_readers(e):
            raise
        raise GraphError(r.loc, f"operator {k} ({name}): its tensors do not fit the operator "
                         f"({type(e).__name__}: {e})") from None
    return None


def _refuse_sizes_set_at_run_time(r: Reader, graph_inputs: list[int]) -> None:
    """An input whose size past the batch dimension is left to run time (-1 in its shape signature)
    stores a placeholder size (1) the model was not made for: refused by name. A batch dimension of
    -1 is taken at the stored size, as TFLite Micro takes it."""
    for i in graph_inputs:
        signature = r.tensor(i).ShapeSignatureAsNumpy()
        signature = [int(d) for d in signature] if isinstance(signature, np.ndarray) else []
        if any(d < 0 for d in signature[1:]):
            raise GraphError(r.loc, f"input '{r.original(i)}' has a size set at run time (shape signature "
                             f"{signature}; the file stores {list(r.shape(i))} in its place), and Tinsmith compiles "
                             f"static shapes",
                             "convert the model with every input dimension but the batch fixed (e.g. "
                             "tf.TensorSpec([1, 16000])), or resize the input before converting")


def _compute_constant_output(r: Reader, i: int) -> None:
    """A graph output that is constant (stored in the file, or a shape folded at build time) is
    still an output the generated code writes: an Identity copies it from the constant."""
    name = r.names[i]
    if r.data(i) is None and name not in r.constants:
        return
    r.value(i)
    stored = r.constants.pop(name)
    r.operator = "output"
    r.emit("Identity", [r.add_constant(f"{name}_value", stored.data)], [name], {})


def _kept_values(r: Reader) -> list:
    """The values kept between invocations that an operator sets; one that none sets (a resource
    variable only read) holds its starting value for good: a constant."""
    kept = []
    for k in r.states.values():
        if k.write is not None:
            kept.append(k)
        else:
            r.constants[k.read] = Constant(k.read, np.full(k.type.shape, k.fill, k.type.numpy_dtype),
                                           "TFLite import (a variable no operator assigns)", r.loc, k.type.quant)
    return kept


def _read_graph(path: Path, where: str, model, graph) -> TfliteModel:
    r = Reader(path, where, model, graph)
    originals = names_of_tensors(r, graph)
    names = operator_names(r, model, graph)
    _refuse_unknown_operators(r, names)
    forms = [problem for k, name in enumerate(names) if (problem := convert_operator(r, k, name, graph.Operators(k)))]
    if forms:
        raise GraphError(r.loc, f"unsupported TFLite operator{'s' * (len(forms) > 1)}: {forms[0]}",
                         more=tuple(forms[1:]))
    graph_inputs, graph_outputs = _indices(graph.InputsAsNumpy()), _indices(graph.OutputsAsNumpy())
    for i in graph_inputs + graph_outputs:
        r.tensor(i)
    _refuse_outputs_listed_twice(r, graph_outputs)
    _refuse_sizes_set_at_run_time(r, graph_inputs)
    for i in graph_outputs:
        _compute_constant_output(r, i)
    kept = _kept_values(r)
    inputs = tuple(ValueSpec(r.names[i], TensorType(r.dtype(i), r.shape(i), r.value_quant(i)), r.loc, r.loc)
                   for i in graph_inputs) + tuple(ValueSpec(k.read, k.type, r.loc, r.loc) for k in kept)
    outputs = tuple(ValueSpec(r.names[i], None, r.loc) for i in graph_outputs) + \
        tuple(ValueSpec(k.write, None, r.loc) for k in kept)
    spec = GraphSpec(model_graph_name(path), where, inputs, outputs, tuple(r.constants.values()), tuple(r.nodes),
                     r.loc, tuple(State(k.read, k.write, k.fill) for k in kept))
    renamed = {r.names[i]: n for i, n in enumerate(originals) if r.names[i] != n}
    return TfliteModel(spec, renamed)


def _refuse_outputs_listed_twice(r: Reader, graph_outputs: list[int]) -> None:
    """A tensor the subgraph lists twice among its outputs would be two parameters of one name."""
    for k, i in enumerate(graph_outputs):
        if i in graph_outputs[:k]:
            raise GraphError(r.loc, f"outputs {graph_outputs.index(i)} and {k} of the model are the same tensor "
                             f"'{r.original(i)}': the model lists this output twice",
                             "a compiled model returns each output once")


def load_tflite_spec(path: str | Path) -> GraphSpec:
    """Read a .tflite file into a GraphSpec (see read_tflite)."""
    return read_tflite(path).spec


def original_names(path: str | Path) -> dict[str, str]:
    """Original tensor name -> identifier, for the inputs and outputs renamed on import."""
    return {old: new for new, old in read_tflite(path).values.items()}
