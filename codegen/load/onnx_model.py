"""ONNX import: an ONNX model file -> GraphSpec, the structure the YAML loader produces, so
expansion, builders and every later stage are shared with graph files.

Names that are not C identifiers are renamed deterministically (valid names are kept,
others sanitised, clashes numbered in file order); `OnnxModel` remembers the original names.
Initializers and Constant nodes become constants, attributes become Python values, and
shapes must be static: a symbolic first dimension is taken as batch size 1, any other
dynamic dimension is an error naming the input. Models older than opset 18 are upgraded
with ONNX's version converter, because primitives follow the current operator definitions.
"""
from __future__ import annotations

import functools
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, NamedTuple

import numpy as np

from tinsmith import limits
from tinsmith.errors import GraphError, SourceLoc
from tinsmith.files import irregular_file
from tinsmith.ir import Constant, TensorType
from tinsmith.ir.names import numbered
from tinsmith.load.build_info import display_path, model_graph_name
from tinsmith.load.constants import LoaderError
from tinsmith.load.graph_file import SUPPORTED_DTYPES, GraphSpec, NodeSpec, ValueSpec, check_node_count
from tinsmith.load.identifiers import identifier_problem, valid_identifier
from tinsmith.load.onnx_quant import fold_qdq
from tinsmith.load.subgraph import Subgraph, SubgraphNode
from tinsmith.ops.shape_ops import storage_dtype

MIN_OPSET = 18  # older models are upgraded to this opset of the default domain
DEFAULT_DOMAINS = ("", "ai.onnx")


@dataclass(frozen=True)
class OnnxLoc(SourceLoc):
    """A place in an ONNX model, which has no lines: a node (col is its index), an input,
    an output or an initializer. Prints as `model.onnx: node 'conv1' (Conv)`."""

    what: str = ""

    def __str__(self) -> str:
        return f"{self.path}: {self.what}" if self.what else self.path


def printable(name: str) -> str:
    """An ONNX name as messages and generated comments show it: control characters, non-ASCII
    and comment delimiters escaped, so the text stays on one line of any C or C++ comment."""
    text = name.encode("ascii", "backslashreplace").decode("ascii")
    text = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)
    return text.replace("*/", "*\\/").replace("/*", "/\\*")


def sanitize(name: str, prefix: str, kind: str = "value") -> str:
    """`name` made a valid identifier for a `kind` (graph, value, node): other characters become
    '_', `prefix` goes before a leading digit, and a keyword, a macro or another name the
    generated code cannot take gets a trailing '_' (see identifiers.valid_identifier)."""
    return valid_identifier(name, prefix, kind)


def unique_names(originals: Iterable[str], prefix: str) -> dict[str, str]:
    """Map each distinct value name to an identifier: valid names stay, the others are sanitised
    and numbered (`_2`, `_3`, ...) in order when they would clash."""
    originals = list(dict.fromkeys(originals))
    result = {n: n for n in originals if identifier_problem(n) is None}
    taken = set(result)
    for n in originals:
        if n in result:
            continue
        base = candidate = sanitize(n, prefix)
        k = 2
        while candidate in taken or identifier_problem(candidate):  # ('float_' -> 'float_2', no '__')
            candidate = f"{base.rstrip('_')}_{k}"
            k += 1
        taken.add(candidate)
        result[n] = candidate
    return result


@dataclass(frozen=True)
class OnnxModel:
    """An imported model: the GraphSpec, plus what a readable graph file wants to mention."""

    spec: GraphSpec
    values: Mapping[str, str]  # identifier -> original ONNX value name, where they differ
    nodes: tuple[str, ...]  # original ONNX node name of each spec node ("" if unnamed)
    constant_origins: Mapping[str, str] = field(default_factory=dict)  # constant -> what it was
    opset: int = 0
    upgraded_from: int | None = None
    producer: str = ""
    batch_inputs: tuple[str, ...] = ()  # inputs whose symbolic first dimension was set to `batch`


def _onnx():
    import onnx  # imported when needed: reading a YAML graph file does not pay for it
    return onnx


def read_model_proto(path: Path, where: str):
    """The ModelProto of an ONNX file (external data loaded); unreadable files are GraphErrors."""
    onnx = _onnx()
    loc = OnnxLoc(where, 0, 0)
    problem = irregular_file(path)
    if problem:
        raise GraphError(loc, f"cannot read model file: {problem}")
    try:
        return onnx.load(str(path))
    except FileNotFoundError:
        raise GraphError(loc, "cannot read model file: No such file or directory") from None
    except OSError as e:
        raise GraphError(loc, f"cannot read model file: {e.strerror or e}") from None
    except Exception as e:  # protobuf's DecodeError and friends: not an ONNX file
        raise GraphError(loc, f"not a valid ONNX model ({type(e).__name__}: {e})",
                         "export it with torch.onnx.export, tf2onnx or onnx.save") from None


_CONTEXT = re.compile(r"Name:\s*(?P<name>.*?)\s*OpType:\s*(?P<op>\S*)")


def check_model(model, where: str) -> None:
    """onnx.checker on the model as read, before any other ONNX code (inliner, version converter,
    shape inference) walks it: those trust the model, and some crash the process on an attribute
    of the wrong type. The full check (strict shape inference) runs too; every complaint becomes a
    GraphError naming the node when the checker says which one."""
    onnx = _onnx()
    for full in (False, True):
        try:
            onnx.checker.check_model(model, full_check=full)
        except Exception as e:  # ValidationError, InferenceError, and protobuf's own
            raise _checker_error(e, where, full) from None


def _checker_error(e: Exception, where: str, full: bool) -> GraphError:
    text = str(e)
    context = _CONTEXT.search(text)
    what = ""
    if context:
        name, op = context["name"], context["op"]
        what = f"node '{printable(name)}' ({printable(op)})" if name else f"a {printable(op)} node"
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("==>")]
    reason = printable(" ".join(lines)) if lines else type(e).__name__
    if len(reason) > 400:
        reason = reason[:400] + "..."
    stage = "shape inference" if full else "the ONNX checker"
    return GraphError(OnnxLoc(where, 0, 0, what), f"the model is not valid ONNX ({stage}): {reason}",
                      "re-export the model, or run onnx.checker.check_model on it to see the problem")


def _default_opset(model) -> int:
    return max((o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS), default=0)


# The inliner and the version converter are C++ that trusts the model: the checker runs first,
# and they run in a child process, so a model that still crashes them cannot take the caller
# (a build, an editor plugin) down with it. Exit 0: upgraded; 3: no adapter for some op, so the
# model is kept as written (inlined); the model travels as bytes on stdin and stdout.
_CONVERT = """
import sys, onnx, onnx.inliner, onnx.version_converter
model = onnx.load_from_string(sys.stdin.buffer.read())
if model.functions:
    model = onnx.inliner.inline_local_functions(model)
status = 0
if int(sys.argv[1]):
    try:
        model = onnx.version_converter.convert_version(model, int(sys.argv[1]))
    except Exception:
        status = 3
sys.stdout.buffer.write(model.SerializeToString())
sys.exit(status)
"""
CONVERT_SECONDS = 600


def _with_function_bodies(model) -> Any:
    """The model with each node of an op Tinsmith has neither as a primitive nor as a builder, but
    which ONNX defines as a function of other ops (LinearAttention, FlexAttention, ...), calling a
    model-local copy of that function body, so `_upgraded` inlines it. A body that depends on the
    node (attributes, input types) is made for that node. Nodes inside subgraphs are left as they are."""
    import onnx.defs

    from tinsmith.builders import BUILDERS
    from tinsmith.ops import PRIMITIVES
    onnx = _onnx()
    versions = {o.domain or "": o.version for o in model.opset_import}
    wanted = []
    for node in model.graph.node:
        domain = "" if node.domain in DEFAULT_DOMAINS else node.domain
        label = f"{domain}.{node.op_type}" if domain else node.op_type
        if label in PRIMITIVES or label in BUILDERS or domain not in versions:
            continue
        try:
            schema = onnx.defs.get_schema(node.op_type, versions[domain], domain)
        except Exception:  # noqa: BLE001  (no such op in ONNX: reported as unsupported later)
            continue
        if schema.has_function or schema.has_context_dependent_function:
            wanted.append((node, schema))
    if not wanted:
        return model
    model = type(model).FromString(model.SerializeToString())  # a copy to edit
    try:
        typed = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001  (the checker's shape inference reports it later)
        return model
    types = {v.name: v.type for v in (*typed.graph.input, *typed.graph.value_info, *typed.graph.output)}
    types.update({t.name: onnx.helper.make_tensor_type_proto(t.data_type, list(t.dims))
                  for t in typed.graph.initializer})
    taken = {f.name for f in model.functions}
    for k, (original, schema) in enumerate(wanted):
        node = next(n for n in model.graph.node if n.SerializeToString() == original.SerializeToString())
        if schema.has_function:
            body = schema.function_body
        else:
            made = schema.get_context_dependent_function(
                node.SerializeToString(), [types[i].SerializeToString() if i in types else b"" for i in node.input])
            body = onnx.FunctionProto.FromString(made)
        function = onnx.FunctionProto()
        function.CopyFrom(body)
        name = numbered(f"{node.op_type}_body", taken)
        taken.add(name)
        function.name, function.domain = name, node.domain
        node.op_type = name
        model.functions.append(function)
        for imported in function.opset_import:
            if (imported.domain or "") not in versions:
                model.opset_import.append(imported)
                versions[imported.domain or ""] = imported.version
    return model


class _Conversion(NamedTuple):
    returncode: int
    stdout: bytes
    stderr: bytes


_CONVERSIONS: OrderedDict[tuple[bytes, int], _Conversion] = OrderedDict()
_CONVERSIONS_KEPT = 4  # results kept, of models up to _CONVERSION_KEPT_BYTES each
_CONVERSION_KEPT_BYTES = 64 << 20


def _converted(serialized: bytes, opset: int) -> _Conversion:
    """_CONVERT run on a serialized model in a process of its own (the converter and the inliner
    can crash or hang on a hostile model). The last few results are kept by the model's digest:
    one command lowers a model several times (`tinsmith validate` and `run` do), and each
    conversion costs a Python start and ONNX's import."""
    import hashlib
    import subprocess
    import sys
    key = (hashlib.sha256(serialized).digest(), opset)
    if key in _CONVERSIONS:
        _CONVERSIONS.move_to_end(key)
        return _CONVERSIONS[key]
    proc = subprocess.run([sys.executable, "-c", _CONVERT, str(opset)], input=serialized, capture_output=True,
                          timeout=CONVERT_SECONDS)
    result = _Conversion(proc.returncode, proc.stdout, proc.stderr)
    if len(serialized) + len(proc.stdout) <= _CONVERSION_KEPT_BYTES:
        _CONVERSIONS[key] = result
        while len(_CONVERSIONS) > _CONVERSIONS_KEPT:
            _CONVERSIONS.popitem(last=False)
    return result


def _upgraded(model, where: str) -> tuple[Any, int | None]:
    """The model at MIN_OPSET or later (local functions inlined), and the opset it had if it was
    upgraded."""
    import subprocess
    opset = _default_opset(model)
    upgrade = 0 < opset < MIN_OPSET
    if not upgrade and not model.functions:
        return model, None
    loc = OnnxLoc(where, 0, 0)
    try:
        proc = _converted(model.SerializeToString(), MIN_OPSET if upgrade else 0)
    except subprocess.TimeoutExpired:
        raise GraphError(loc, f"upgrading the model to opset {MIN_OPSET} took more than {CONVERT_SECONDS} s") from None
    except (OSError, ValueError) as e:  # ValueError: a model over protobuf's 2 GiB
        raise GraphError(loc, f"cannot upgrade the model: {e}") from None
    if proc.returncode not in (0, 3):
        how = f"signal {-proc.returncode}" if proc.returncode < 0 else f"status {proc.returncode}"
        reason = printable(proc.stderr.decode("utf-8", "replace").strip().splitlines()[-1]) if proc.stderr.strip() \
            else how
        # name only what this model needs: the converter (an old opset), the inliner (local functions)
        tool = " and ".join(t for t, used in (("inliner", bool(model.functions)), ("version converter", upgrade))
                            if used)
        advice = " and ".join(a for a, used in ((f"at opset {MIN_OPSET} or later", upgrade),
                                                ("without model-local functions", bool(model.functions))) if used)
        raise GraphError(loc, f"ONNX's {tool} failed on this model ({reason})", f"export the model {advice}")
    converted = _onnx().load_from_string(proc.stdout)
    return converted, opset if upgrade and proc.returncode == 0 else None


def to_array(tensor, loc: SourceLoc, what: str) -> np.ndarray:
    """A TensorProto's data in the element type Tinsmith stores it in (float32, int64, ...)."""
    from onnx import numpy_helper
    problem = limits.shape_problem(tuple(tensor.dims), elements_limit="constant_elements")
    if problem:
        raise GraphError(loc, f"{what} {problem}",
                         limits.hint("rank" if "'rank'" in problem else "constant_elements"))
    try:
        data = numpy_helper.to_array(tensor)
    except Exception as e:
        raise GraphError(loc, f"cannot read the data of {what}: {e}") from None
    target = storage_dtype(data.dtype)
    if target is None:
        raise GraphError(loc, f"{what} holds {data.dtype} data, which Tinsmith cannot compute with",
                         "Tinsmith computes with numbers (floating point and integers) and booleans, not strings")
    return np.require(data.astype(target), requirements="C")


def _f32(x: float) -> float:
    """A float32 attribute as the shortest decimal that is the same float32 (1e-05, not
    9.99999974737875e-06): readable in a graph file, and the same value once stored as float32."""
    return float(str(np.float32(x)))


@dataclass(frozen=True)
class _Unsupported:
    """An attribute value of a kind Tinsmith cannot hold (a subgraph, a sparse tensor)."""

    kind: str

    def __repr__(self) -> str:
        return f"<{self.kind}>"


def _attr_value(attr, loc: SourceLoc) -> Any:
    """An AttributeProto as a plain Python value (tensors as arrays)."""
    kinds = _onnx().AttributeProto
    convert = {
        kinds.INT: lambda a: int(a.i),
        kinds.FLOAT: lambda a: _f32(a.f),
        kinds.STRING: lambda a: a.s.decode("utf-8", "replace"),
        kinds.INTS: lambda a: [int(v) for v in a.ints],
        kinds.FLOATS: lambda a: [_f32(v) for v in a.floats],
        kinds.STRINGS: lambda a: [v.decode("utf-8", "replace") for v in a.strings],
        kinds.TENSOR: lambda a: to_array(a.t, loc, f"attribute '{a.name}'"),
    }.get(attr.type)
    # Subgraphs, sparse tensors, type protos: only ops Tinsmith does not support take them.
    return convert(attr) if convert else _Unsupported(kinds.AttributeType.Name(attr.type).lower())


def _static_shape(value_info, name: str, batch: int, loc: SourceLoc) -> tuple[tuple[int, ...], bool]:
    """The static shape of a graph input; True if a symbolic batch dimension was set to `batch`."""
    t = value_info.type
    hint = "give the input a static shape before importing (see onnx.tools.update_model_dims)"
    if not t.HasField("tensor_type"):
        raise GraphError(loc, f"input '{name}' is not a tensor", "Tinsmith compiles tensor inputs only")
    if not t.tensor_type.HasField("shape"):
        raise GraphError(loc, f"input '{name}' has no shape", hint)
    dims = t.tensor_type.shape.dim
    written = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in dims]
    shape, batched = [], False
    for i, d in enumerate(written):
        if isinstance(d, int) and d > 0:
            shape.append(d)
        elif isinstance(d, str) and i == 0 and len(dims) > 1:
            shape.append(batch)  # a symbolic batch: embedded inference runs one sample at a time
            batched = True
        elif d == 0:  # static and empty: no data, so whatever reads it is known at build time
            shape.append(0)
        else:
            fixed = [x if isinstance(x, int) and x > 0 else 1 for x in written]
            raise GraphError(loc, f"input '{name}' has a dynamic dimension {i} ({d!r}) in shape "
                             f"{written}; Tinsmith compiles static shapes only",
                             f"fix the shape before importing, e.g. with onnx.tools.update_model_dims."
                             f"update_inputs_outputs_dims(model, {{'{name}': {fixed}}}, {{...}})")
    problem = limits.shape_problem(shape)
    if problem:
        raise GraphError(loc, f"input '{name}' {problem}",
                         limits.hint("rank" if "'rank'" in problem else "tensor_elements"))
    return tuple(shape), batched


def _elem_dtype(value_info) -> str | None:
    try:
        return np.dtype(_onnx().helper.tensor_dtype_to_np_dtype(value_info.type.tensor_type.elem_type)).name
    except Exception:
        return None


_CONSTANT_FORMS = {"value": lambda v: v, "value_float": lambda v: np.array(v, np.float32),
                   "value_floats": lambda v: np.array(v, np.float32),
                   "value_int": lambda v: np.array(v, np.int64), "value_ints": lambda v: np.array(v, np.int64)}


def _constant_node_data(attrs: Mapping[str, Any]) -> np.ndarray | None:
    """The data of a Constant node, or None to keep the node (the primitive reports what is wrong)."""
    if len(attrs) != 1 or next(iter(attrs)) not in _CONSTANT_FORMS:
        return None
    key, value = next(iter(attrs.items()))
    return np.require(_CONSTANT_FORMS[key](value), requirements="C")


def _node_names(graph) -> list[str | None]:
    """Names of the nodes: as written when valid, else sanitised; clashes numbered in node order;
    None for unnamed nodes (expansion names them after op and output, as in graph files)."""
    names: list[str | None] = []
    taken: set[str] = set()
    for node in graph.node:
        if not node.name:
            names.append(None)
            continue
        base = candidate = (sanitize(node.name, "n", "node") if identifier_problem(node.name, "node")
                            else node.name)
        k = 2
        while candidate in taken or identifier_problem(candidate, "node"):
            candidate, k = f"{base.rstrip('_')}_{k}", k + 1
        taken.add(candidate)
        names.append(candidate)
    return names


def _node_value_names(nodes) -> list[str]:
    """Value names nodes write and read, in order, with those of their subgraphs (If, Loop)."""
    order: list[str] = []
    for node in nodes:
        order += [n for n in node.output if n] + [n for n in node.input if n]
        for a in node.attribute:
            if a.HasField("g"):
                order += [v.name for v in a.g.input] + [t.name for t in a.g.initializer]
                order += _node_value_names(a.g.node) + [v.name for v in a.g.output]
    return order


def _value_names(graph, graph_inputs) -> dict[str, str]:
    """Identifier for every value name, in file order: inputs, initializers, node outputs (those
    inside subgraphs too)."""
    order = [v.name for v in graph_inputs] + [t.name for t in graph.initializer]
    order += _node_value_names(graph.node)
    values = unique_names(order + [v.name for v in graph.output], "v")
    values[""] = ""  # an omitted optional input
    return values


# ONNX ops whose optional outputs another primitive computes: op -> primitive per later output.
# A model that reads the output gets that node beside the op's own (which keeps its first output),
# so the extra work is done only where someone reads the result.
SPLIT_OUTPUTS = {"MaxPool": ("MaxPoolIndices",)}

# ONNX ops that are another op (a builder) when an int attribute is set: op -> (attribute, op).
# The attribute is left out: the other op is that form.
ATTRIBUTE_FORMS = {"BatchNormalization": ("training_mode", "BatchNormalizationTraining"),
                   "Resize": ("antialias", "ResizeAntialias")}

# Outputs ONNX defines that Tinsmith does not compute: op -> (outputs computed, why not the rest).
UNCOMPUTED_OUTPUTS = {
    "BatchNormalization": (1, "its running mean and variance outputs exist in training mode only, which "
                              "is not supported: Tinsmith compiles inference (training_mode=0)"),
}


class _Reader:
    """Builds the parts of a GraphSpec from one (upgraded) ModelProto."""

    def __init__(self, model, where: str, batch: int):
        self.graph = model.graph
        self.where = where
        self.batch = batch
        initializers = {t.name for t in self.graph.initializer}
        self.graph_inputs = [v for v in self.graph.input if v.name not in initializers]
        self.output_names = [v.name for v in self.graph.output]
        self.values = _value_names(self.graph, self.graph_inputs)
        self.taken_values = set(self.values.values())
        self.node_names = _node_names(self.graph)
        self.constants: list[Constant] = []
        self.origins: dict[str, str] = {}

    def loc(self, what: str, index: int = 0) -> OnnxLoc:
        return OnnxLoc(self.where, 0, index, what)

    def node_loc(self, i: int, node) -> OnnxLoc:
        name = f"'{printable(node.name)}'" if node.name else f"#{i}"
        return self.loc(f"node {name} ({printable(node.op_type)})", i)

    def filler(self, base: str) -> str:
        """A value name for an unnamed optional output that comes before a named one."""
        name = numbered(base, self.taken_values)
        self.taken_values.add(name)
        return name

    def add_constant(self, onnx_name: str, data: np.ndarray, what: str, loc: SourceLoc) -> None:
        name = self.values[onnx_name]
        self.constants.append(Constant(name, data, f"{self.where} {what}", loc))
        self.origins[name] = what

    def initializers(self) -> None:
        """Initializers that nodes read become constants (unused ones are left out)."""
        used = set(_node_value_names(self.graph.node)) | set(self.output_names)  # (subgraphs read them too)
        for t in self.graph.initializer:
            if t.name in used and self.values[t.name] not in self.origins:
                what = f"initializer '{printable(t.name)}'"
                loc = self.loc(what)
                self.add_constant(t.name, to_array(t, loc, what), what, loc)

    def inputs(self) -> tuple[tuple[ValueSpec, ...], tuple[str, ...]]:
        """Graph inputs (initializers excluded), and those whose batch dimension was set."""
        specs, batched = [], []
        for v in self.graph_inputs:
            loc = self.loc(f"input '{printable(v.name)}'")
            dtype = _elem_dtype(v)
            if dtype not in SUPPORTED_DTYPES:
                shown = "string" if dtype == "object" else dtype or "unknown"  # NumPy holds strings as objects
                raise GraphError(loc, f"input '{printable(v.name)}' has element type {shown}",
                                 f"Tinsmith compiles models whose inputs are {', '.join(SUPPORTED_DTYPES)}")
            shape, was_batched = _static_shape(v, printable(v.name), self.batch, loc)
            if was_batched:
                batched.append(self.values[v.name])
            specs.append(ValueSpec(self.values[v.name], TensorType(dtype, shape), loc, loc))
        return tuple(specs), tuple(batched)

    def attrs(self, node, loc: SourceLoc) -> dict[str, Any]:
        """A node's attributes as plain values; a subgraph (If's branches, Loop's body) as a Subgraph."""
        return {a.name: self.subgraph(a.g, loc) if a.type == _onnx().AttributeProto.GRAPH else _attr_value(a, loc)
                for a in node.attribute}

    def subgraph(self, graph, loc: SourceLoc) -> Subgraph:
        """A subgraph with value names mapped as the enclosing graph's are; Constant nodes and
        initializers become its constants."""
        constants = {self.values[t.name]: to_array(t, loc, f"initializer '{printable(t.name)}'")
                     for t in graph.initializer}
        nodes = []
        for node in graph.node:
            attrs = self.attrs(node, loc)
            data = _constant_node_data(attrs) if node.op_type == "Constant" and len(node.output) == 1 else None
            if data is not None:
                constants[self.values[node.output[0]]] = data
                continue
            domain = "" if node.domain in DEFAULT_DOMAINS else node.domain
            nodes.append(SubgraphNode(f"{domain}.{node.op_type}" if domain else node.op_type,
                                      tuple(self.values[n] for n in node.input),
                                      tuple(self.values[n] for n in node.output), attrs))
        return Subgraph(tuple(self.values[v.name] for v in graph.input), tuple(nodes),
                        tuple(self.values[v.name] for v in graph.output), constants)

    def outputs(self) -> tuple[ValueSpec, ...]:
        return tuple(ValueSpec(self.values[n], None, self.loc(f"output '{printable(n)}'"))
                     for n in self.output_names)

    def nodes(self) -> tuple[tuple[NodeSpec, ...], tuple[str, ...]]:
        """Node specs (Constant nodes become constants), and each one's ONNX name."""
        specs, originals = [], []
        for i, node in enumerate(self.graph.node):
            loc = self.node_loc(i, node)
            attrs = self.attrs(node, loc)
            domain = "" if node.domain in DEFAULT_DOMAINS else node.domain
            op = f"{domain}.{node.op_type}" if domain else node.op_type
            if op == "Constant" and len(node.output) == 1 and node.output[0] not in self.output_names:
                data = _constant_node_data(attrs)
                if data is not None:  # data rather than a computation: a constant, like an initializer
                    what = f"Constant node '{printable(node.name)}'" if node.name else f"Constant node #{i}"
                    self.add_constant(node.output[0], data, what, loc)
                    continue
            outs = list(node.output)
            while outs and not outs[-1]:  # omitted trailing optional outputs
                outs.pop()
            name = self.node_names[i]
            if op in ATTRIBUTE_FORMS and attrs.get(ATTRIBUTE_FORMS[op][0]):
                flag, op = ATTRIBUTE_FORMS[op]
                attrs = {k: v for k, v in attrs.items() if k != flag}
            if op in UNCOMPUTED_OUTPUTS and len(outs) > UNCOMPUTED_OUTPUTS[op][0]:
                shown = f"'{printable(node.name)}'" if node.name else f"#{i}"
                raise GraphError(loc, f"{op} node {shown}: {UNCOMPUTED_OUTPUTS[op][1]}",
                                 "leave the output unnamed (the model's consumers must not read it)")
            outputs = tuple(self.values[o] if o else self.filler(f"{name or 'node'}_unused{j}")
                            for j, o in enumerate(outs))
            inputs = tuple(self.values[n] for n in node.input)
            parts = [(op, name, outputs)]
            if op in SPLIT_OUTPUTS and len(outputs) > 1:
                parts = [(op, name, outputs[:1])] + [
                    (extra, f"{name}_{extra.lower()}" if name else None, (out,))
                    for extra, out, written in zip(SPLIT_OUTPUTS[op], outputs[1:], outs[1:]) if written]
            for part_op, part_name, part_outputs in parts:
                specs.append(NodeSpec(part_op, part_name, inputs, part_outputs, attrs, loc, loc,
                                      tuple(loc for _ in inputs), tuple(loc for _ in part_outputs),
                                      {k: loc for k in attrs}, {k: loc for k in attrs}, loc, loc, loc))
                originals.append(node.name)
        return tuple(specs), tuple(originals)


def read_onnx(path: str | Path, batch: int = 1) -> OnnxModel:
    """Read an ONNX model file into a GraphSpec. Every problem is a GraphError located at the
    node, input or initializer concerned."""
    path = Path(path)
    where = display_path(path)
    if not isinstance(batch, int) or batch < 1:
        raise GraphError(OnnxLoc(where, 0, 0), f"the batch size must be a positive integer, not {batch}")
    model = read_model_proto(path, where)
    check_node_count(len(model.graph.node), OnnxLoc(where, 0, 0, "graph"), "the model")
    _check_text(model, where)
    check_model(model, where)
    _check_outputs(model, where)
    model, upgraded_from = _upgraded(_with_function_bodies(model), where)
    reader = _Reader(model, where, batch)
    reader.initializers()
    inputs, batched = reader.inputs()
    nodes, originals = reader.nodes()
    # QDQ patterns (DequantizeLinear -> Conv -> QuantizeLinear, ...) become integer operators
    nodes, originals, constants = fold_qdq(nodes, originals, reader.constants, {v.name: v.type.dtype for v in inputs},
                                           [v.name for v in reader.outputs()], reader.filler)
    spec = GraphSpec(model_graph_name(path), where, inputs, reader.outputs(), constants,
                     nodes, reader.loc("graph"))
    renamed = {new: old for old, new in reader.values.items() if old != new}
    producer = " ".join(p for p in (model.producer_name, model.producer_version) if p)
    return OnnxModel(spec, renamed, originals, reader.origins, _default_opset(model), upgraded_from,
                     producer, batched)


def _check_text(model, where: str) -> None:
    """Every string in the model is text: protobuf hands over a string field that is not valid
    UTF-8 as bytes (a name, a domain, the producer), which no later step expects."""
    from google.protobuf.descriptor import FieldDescriptor

    def walk(message, path: str) -> None:
        for field, value in message.ListFields():
            here = f"{path}.{field.name}" if path else field.name
            repeated = field.is_repeated if hasattr(field, "is_repeated") else \
                field.label == FieldDescriptor.LABEL_REPEATED  # (protobuf before 6.31 has only label)
            values = value if repeated else [value]
            if field.type == FieldDescriptor.TYPE_STRING:
                for i, text in enumerate(values):
                    if not isinstance(text, str):
                        shown = f"{here}[{i}]" if repeated else here
                        raise GraphError(OnnxLoc(where, 0, 0), f"{shown} is not valid UTF-8 text: "
                                         f"{printable(repr(text)[:80])}",
                                         "ONNX strings are UTF-8; re-export the model")
            elif field.type == FieldDescriptor.TYPE_MESSAGE:
                for i, item in enumerate(values):
                    walk(item, f"{here}[{i}]" if repeated else here)
    walk(model, "")


def _check_outputs(model, where: str) -> None:
    """A model with outputs, each listed once: a graph file needs both."""
    names = [v.name for v in model.graph.output]
    if not names:
        raise GraphError(OnnxLoc(where, 0, 0, "graph"), "the model has no outputs",
                         "Tinsmith compiles models that compute something; export it with outputs")
    for i, name in enumerate(names):
        if name in names[:i]:
            raise GraphError(OnnxLoc(where, 0, i, f"output '{printable(name)}'"),
                             "the model lists this output twice", "a graph file lists each output once")


def located(e: GraphError) -> GraphError:
    """An error at a place in an ONNX model as `model.onnx: error: node 'x' (Conv): ...`: a binary
    file has no lines, so the location is the file and the message names the place."""
    if not isinstance(e.loc, OnnxLoc):
        return e
    message = f"{e.loc.what}: {e.message}" if e.loc.what else e.message
    return type(e)(SourceLoc.whole_file(e.loc.path), message, e.hint)


def load_onnx_spec(path: str | Path, batch: int = 1) -> GraphSpec:
    """Read an ONNX model file into a GraphSpec (see read_onnx)."""
    return read_onnx(path, batch).spec


# --- the `onnx` constant loader: {onnx: model.onnx, initializer: NAME} in a graph file -----
@functools.lru_cache(maxsize=4)
def _initializers(path: str, mtime_ns: int, size: int) -> dict[str, Any]:
    model = _onnx().load(path)
    return {t.name: t for t in model.graph.initializer}


def read_initializer(path: Path, name: Any) -> np.ndarray:
    """The data of initializer `name` in an ONNX file, for the `onnx` constant loader."""
    if not isinstance(name, str) or not name:
        raise LoaderError("'initializer' must name an initializer of the model", "initializer")
    problem = irregular_file(path)
    if problem:
        raise LoaderError(f"cannot read model file '{path.name}': {problem}", "onnx")
    try:
        stat = path.stat()
        tensors = _initializers(str(path), stat.st_mtime_ns, stat.st_size)
    except FileNotFoundError:
        raise LoaderError(f"model file '{path.name}' does not exist", "onnx",
                          "paths are relative to the graph file") from None
    except OSError as e:
        raise LoaderError(f"cannot read model file '{path.name}': {e.strerror or e}", "onnx") from None
    except Exception as e:
        raise LoaderError(f"'{path.name}' is not a valid ONNX model ({type(e).__name__})", "onnx") from None
    if name not in tensors:
        close = ", ".join(sorted(tensors)[:8]) or "none"
        raise LoaderError(f"'{path.name}' has no initializer '{name}'", "initializer",
                          f"it holds: {close}{', ...' if len(tensors) > 8 else ''}")
    try:
        return to_array(tensors[name], SourceLoc.whole_file(str(path)), f"initializer '{printable(name)}'")
    except GraphError as e:  # (the loader's caller locates it at the constant's entry)
        raise LoaderError(e.message, "initializer", e.hint) from None
