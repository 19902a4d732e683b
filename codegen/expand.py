"""Stage 2, expand: GraphSpec -> typed Graph of primitives.

Nodes are taken in dependency order; builder nodes are expanded through their `insert`,
and every primitive is checked (arity, attributes, types) and typed as it is added, so
an error points at the node, input or attribute of the graph file that caused it.

A node whose inputs are all constants is evaluated as soon as it is added (with its
primitive's NumPy reference) and its outputs become constants, so shape computations
(Shape -> Gather -> Concat -> Reshape) are known when the node that needs them is checked.
"""
from __future__ import annotations

import difflib
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from tinsmith import limits
from tinsmith.builders import BUILDERS
from tinsmith.errors import GraphError, SourceLoc
from tinsmith.ir import Constant, Graph, Node, TensorType
from tinsmith.ir.names import numbered
from tinsmith.load import GraphSpec, NodeSpec
from tinsmith.ops import PRIMITIVES, Attr, InferArgs, OpError, check_attrs
from tinsmith.ops.shape_ops import BUILD_TIME_OPS

MAX_LISTED_NODES = 5  # per unsupported op in the error message


class GraphBuilder:
    """A graph under construction: the API op builders use to add nodes and constants."""

    def __init__(self, spec: GraphSpec, taken: set[str]):
        self.path = spec.path
        self.types: dict[str, TensorType] = {v.name: v.type for v in spec.inputs}
        self.graph_outputs = {v.name for v in spec.outputs}
        self.constants: dict[str, Constant] = {c.name: c for c in spec.constants}
        self.types.update({c.name: c.type for c in spec.constants})
        self.nodes: list[Node] = []
        self._taken = set(taken)
        self._scope: list[tuple[str, NodeSpec]] = []  # (node name, graph-file node) being expanded

    # --- the builder-facing API ---------------------------------------------------------
    def add(self, op: str, inputs: Sequence[str], attrs: Mapping[str, Any] | None = None) -> list[str]:
        """Add primitive or builder `op` at the current position; return its output names."""
        name = self.fresh(op.lower().replace(".", "_"))
        if op in BUILDERS:
            return self._expand_builder(op, name, list(inputs), dict(attrs or {}), None)
        prim = PRIMITIVES[op]
        # A variadic op (outputs=-1) gets its output names once inference has counted them.
        outputs = [self.fresh(f"{name}_out" if prim.outputs == 1 else f"{name}_out{i}", scoped=False)
                   for i in range(max(prim.outputs, 0))]
        return self._add_primitive(op, name, list(inputs), outputs, dict(attrs or {}))

    def scalar(self, value: float) -> str:
        """A float32 scalar constant (rank 0, broadcasts against anything)."""
        name = self.fresh("c")
        owner = self._scope[-1][1] if self._scope else None
        self.constants[name] = Constant(name, np.array(value, dtype=np.float32),
                                        "builder literal", owner.loc if owner else SourceLoc(self.path, 1, 1))
        self.types[name] = self.constants[name].type
        return name

    def constant(self, data: Any, hint: str = "c") -> str:
        """A constant holding `data` (e.g. an int64 shape or axes operand for a primitive)."""
        data = np.asarray(data)
        name = self.fresh(hint)
        owner = self._scope[-1][1] if self._scope else None
        self.constants[name] = Constant(name, np.ascontiguousarray(data), "builder literal",
                                        owner.loc if owner else SourceLoc(self.path, 1, 1))
        self.types[name] = self.constants[name].type
        return name

    def type_of(self, value: str) -> TensorType:
        """The inferred type of a value already in the graph."""
        return self.types[value]

    def value_of(self, value: str) -> np.ndarray | None:
        """The data of a constant value, or None if the value is computed at run time. A value
        with zero elements is known too: it holds no data, whoever computes it."""
        c = self.constants.get(value)
        if c is not None:
            return c.data
        return self._empty(value)

    def _empty(self, value: str) -> np.ndarray | None:
        """An empty array of the value's type if the value has zero elements, else None."""
        t = self.types.get(value)
        if t is None or t.size != 0:
            return None
        try:
            return np.zeros(t.shape, t.numpy_dtype)
        except ValueError:  # zero elements, but the other dimensions' product past what NumPy indexes
            return None

    def fresh(self, hint: str, scoped: bool = True) -> str:
        """A value or node name not used anywhere in the graph, derived from `hint`
        (and prefixed with the name of the node being expanded, if `scoped`)."""
        base = f"{self._scope[-1][0]}_{hint}" if self._scope and scoped else hint
        name = numbered(base, self._taken)
        self._taken.add(name)
        return name

    @contextmanager
    def scope(self, name: str, spec: NodeSpec) -> Iterator[None]:
        """Nodes added inside are named after `name` and located at `spec`."""
        self._scope.append((name, spec))
        try:
            yield
        finally:
            self._scope.pop()

    # --- checking and typing ------------------------------------------------------------
    def _spec(self) -> NodeSpec:
        return self._scope[0][1]

    def _is_written(self, name: str) -> bool:
        """True if node `name` is the graph file's node itself, not one a builder inserted."""
        return len(self._scope) == 1 and self._scope[0][0] == name

    def _locate(self, e: OpError, name: str, inputs: Sequence[str], declared: Sequence[Attr]) -> SourceLoc:
        """The part of the graph file an op's complaint is about: attribute, input or node."""
        spec = self._spec()
        if self._is_written(name):
            if e.attr is not None and e.attr in spec.attr_key_locs:
                known = any(a.name == e.attr for a in declared)
                return spec.attr_locs[e.attr] if known else spec.attr_key_locs[e.attr]
            if e.input is not None:
                if e.input < len(spec.input_locs):
                    return spec.input_locs[e.input]
                return spec.inputs_loc or spec.loc  # an input that is missing from the list
        elif e.input is not None and e.input < len(inputs) and inputs[e.input] in spec.inputs:
            # A node a builder inserted reads one of the written node's inputs: point there.
            return spec.input_locs[spec.inputs.index(inputs[e.input])]
        return spec.loc

    def _error(self, e: OpError, op: str, name: str, inputs: Sequence[str], declared: Sequence[Attr],
               prefix: bool = False) -> GraphError:
        """A GraphError for an OpError; with `prefix`, the message (from a shape rule) gets the node."""
        message = str(e)
        if prefix:  # "MatMul inner dimensions differ" -> "MatMul node 'mm': inner dimensions differ"
            message = message[len(op) + 1:] if message.startswith(op + " ") else message
            message = f"{op} node '{name}': {message}"
        hint = None
        if not self._is_written(name):
            spec = self._spec()
            hint = f"while expanding {spec.op} node '{self._scope[0][0]}' into primitives"
        return GraphError(self._locate(e, name, inputs, declared), message, hint)

    def _check_arity(self, what: str, lo: int, hi: int, inputs: Sequence[str]) -> None:
        if len(inputs) < lo or (hi >= 0 and len(inputs) > hi):
            want = f"{lo}" if lo == hi else (f"at least {lo}" if hi < 0 else f"{lo} to {hi}")
            plural = "s" if not want.endswith(" 1") and want != "1" else ""
            # Point at the first input too many, or at the list that lacks one.
            raise OpError(f"{what} takes {want} input{plural}, got {len(inputs)}",
                          input=hi if len(inputs) > hi >= 0 else len(inputs))
        for i, name in enumerate(inputs):
            if name == "" and i < lo:
                raise OpError(f"input {i} of {what} is required and cannot be omitted", input=i)

    def _check_output_count(self, what: str, have: int, named: int, name: str, exact: bool) -> None:
        """A node names no more outputs than its op has, and all of them if `exact`."""
        if named == have or (named < have and not exact):
            return
        spec = self._spec()
        loc = spec.loc
        if self._is_written(name):  # the first name too many, or the list that lacks one
            loc = spec.output_locs[have] if named > have else (spec.outputs_loc or spec.loc)
        raise GraphError(loc, f"{what} has {have} output{'s' * (have != 1)}, but {named} "
                         f"{'are' if named != 1 else 'is'} named")

    def _add_primitive(self, op: str, name: str, inputs: list[str], outputs: list[str],
                       attrs: dict[str, Any]) -> list[str]:
        """Check, type and add (or fold) one primitive node; return its output names."""
        prim = PRIMITIVES[op]
        what = f"{op} node '{name}'"
        spec = self._spec()
        try:
            self._check_arity(what, prim.min_inputs, prim.max_inputs, inputs)
            checked = check_attrs(prim.attrs, attrs, what)
            for i in prim.constant_inputs:
                if i < len(inputs) and inputs[i] and inputs[i] not in self.constants:
                    raise OpError(f"input {i} of {what} must be a constant, known when the graph "
                                  f"is built", input=i)
        except OpError as e:
            raise self._error(e, op, name, inputs, prim.attrs) from None
        if prim.outputs >= 0:
            # Trailing optional outputs may go unnamed (ONNX leaves them out): they get fresh names.
            self._check_output_count(what, prim.outputs, len(outputs), name, exact=False)
            outputs = outputs + [self.fresh(f"{name}_out{i}", scoped=False)
                                 for i in range(len(outputs), prim.outputs)]
        try:
            args = InferArgs(tuple(self.types[n] if n else None for n in inputs), checked,
                             tuple(self.value_of(n) if n else None for n in inputs))
            out_types = list(self._infer(prim, args, inputs))
        except OpError as e:
            raise self._error(e, op, name, inputs, prim.attrs, prefix=True) from None
        self._check_limits(op, name, inputs, checked, out_types, prim.attrs)
        if prim.outputs < 0 and not outputs:  # inserted by a builder: as many as inferred
            outputs = [self.fresh(f"{name}_out{i}", scoped=False) for i in range(len(out_types))]
        elif prim.outputs < 0:
            self._check_output_count(what, len(out_types), len(outputs), name, exact=True)
        for out, t in zip(outputs, out_types):
            self.types[out] = t
        node = Node(op, name, tuple(inputs), tuple(outputs), checked, spec.loc)
        if not self._fold(node):
            self.nodes.append(node)
        return outputs

    @staticmethod
    def _infer(prim, args: InferArgs, inputs: Sequence[str]):
        """The primitive's output types. An input left empty ('', ONNX's absent optional input) has
        no type: a primitive that reads one anyway (a Concat of ['x', '']) fails on the None, which
        is the graph's fault, not a bug, so it is named as such."""
        try:
            return prim.infer(args)
        except (AttributeError, TypeError):
            empty = [i for i, n in enumerate(inputs) if not n]
            if not empty:
                raise
            raise OpError(f"input {empty[0]} is empty (''), but the operator needs a value there", input=empty[0]) \
                from None

    def _check_limits(self, op: str, name: str, inputs: Sequence[str], attrs: Mapping[str, Any],
                      out_types: Sequence[TensorType], declared: Sequence[Attr]) -> None:
        """The node within the limits (tinsmith.limits), checked here, where shapes are first
        known, so no later stage (tiling, folding, generation) sees a size it would take hours or
        gigabytes over, or an index that does not fit in an int."""
        in_types = [self.types.get(n) if n else None for n in inputs]
        found = limits.node_problem(op, attrs, in_types, out_types, len(self.nodes))
        if found is not None:
            loc = self._locate(OpError(found.message, attr=found.attr), name, inputs, declared)
            raise GraphError(loc, f"{op} node '{name}': {found.message}", limits.hint(found.limit))

    def _fold(self, node: Node) -> bool:
        """Evaluate `node` now if its inputs are all constants (build-time ops also read the types
        of computed inputs); its outputs become constants. False if the node stays."""
        present = [n for n in node.inputs if n]
        # an op whose every input is needed at build time (a window's size) is computed then too
        build_time = node.op in BUILD_TIME_OPS or (bool(present) and all(
            i in PRIMITIVES[node.op].constant_inputs for i, n in enumerate(node.inputs) if n))
        # Empty values hold no data: a node reading only constants and empty values, or writing
        # only empty values, computes nothing at run time (a reduction over an empty set gives
        # its identity, a slice past the end is empty).
        empty_in = any(self._empty(n) is not None for n in present)
        empty_out = all(self.types[n].size == 0 for n in node.outputs)
        known = bool(present) and all(n in self.constants or self._empty(n) is not None for n in present)
        if not (build_time or empty_out or (known and (empty_in or not set(node.outputs) & self.graph_outputs))):
            return False  # (a graph output is written by a kernel into the caller's buffer)
        try:
            # Only the shape of a computed input matters to a build-time op: a zero-stride placeholder
            # (which NumPy refuses for shapes whose dimensions multiply past what it indexes).
            args = [None if not n else self.value_of(n) if self.value_of(n) is not None
                    else np.broadcast_to(np.zeros((), self.types[n].numpy_dtype), self.types[n].shape)
                    for n in node.inputs]
            if empty_out:
                results = [np.zeros(self.types[n].shape, self.types[n].numpy_dtype) for n in node.outputs]
            else:
                with np.errstate(all="ignore"):
                    results = PRIMITIVES[node.op].reference(args, node.attrs)
        except Exception as e:  # noqa: BLE001  (a reference that cannot evaluate these values)
            if not build_time:
                return False  # left to run time
            raise GraphError(node.loc, f"cannot evaluate {node.op} node '{node.name}' when the graph "
                             f"is built: {e}") from None
        for out, value in zip(node.outputs, results):
            t = self.types[out]
            # C order and the inferred shape (a rank-0 result stays rank 0).
            value = np.ascontiguousarray(np.asarray(value, dtype=t.numpy_dtype)).reshape(t.shape)
            if t.size == 0 and out in self.graph_outputs:
                continue  # an empty graph output: nothing to write, no kernel
            target = self.fresh(f"{out}_value", scoped=False) if out in self.graph_outputs else out
            self.constants[target] = Constant(target, value, f"folded from node '{node.name}'", node.loc)
            self.types[target] = t
            if target != out:  # a folded value written to a graph output: copy the value there
                self._add_primitive("Identity", self.fresh(f"{node.name}_copy", scoped=False),
                                    [target], [out], {})
        return True

    def _expand_builder(self, op: str, name: str, inputs: list[str], attrs: dict[str, Any],
                        spec: NodeSpec | None) -> list[str]:
        b = BUILDERS[op]
        spec = spec or self._spec()
        with self.scope(name, spec):
            what = f"{op} node '{name}'"
            try:
                self._check_arity(what, b.min_inputs, b.max_inputs, inputs)
                checked = check_attrs(b.attrs, attrs, what)
            except OpError as e:
                raise self._error(e, op, name, inputs, b.attrs) from None
            try:
                return list(b.insert(self, inputs, checked))
            except OpError as e:  # a builder's own check (e.g. an axis out of range)
                raise self._error(e, op, name, inputs, b.attrs, prefix=True) from None

    def add_spec_node(self, spec: NodeSpec, name: str) -> None:
        """Add one node of the graph file under its own output names."""
        if spec.op in PRIMITIVES:
            with self.scope(name, spec):
                self._add_primitive(spec.op, name, list(spec.inputs), list(spec.outputs),
                                    dict(spec.attrs))
            return
        produced = self._expand_builder(spec.op, name, list(spec.inputs), dict(spec.attrs), spec)
        if len(spec.outputs) > len(produced):
            with self.scope(name, spec):
                self._check_output_count(f"{spec.op} node '{name}'", len(produced), len(spec.outputs),
                                         name, exact=False)
        for wanted, actual in zip(spec.outputs, produced):
            self._rename(actual, wanted, spec, name)

    def _rename(self, actual: str, wanted: str, spec: NodeSpec, name: str) -> None:
        """Give a builder's result the name the graph file chose for it."""
        if any(actual in n.outputs for n in self.nodes):
            def swap(values: tuple[str, ...]) -> tuple[str, ...]:
                return tuple(wanted if v == actual else v for v in values)
            self.nodes = [replace(n, inputs=swap(n.inputs), outputs=swap(n.outputs)) for n in self.nodes]
            self.types[wanted] = self.types.pop(actual)
            return
        # The builder returned an input or constant unchanged: copy it under the new name.
        with self.scope(name, spec):
            self._add_primitive("Identity", self.fresh("identity"), [actual], [wanted], {})


def _at(loc: SourceLoc) -> str:
    """Where something is, for a note: 'at line N' in a graph file, the place in other models."""
    return f"at line {loc.line}" if loc.line else f"at {loc}"


def _unsupported_ops(spec: GraphSpec, names: list[str]) -> None:
    """Every op that is neither a primitive nor a builder, in one error. A single unknown op in
    a graph file is most likely a typo, and is reported as one."""
    unknown: dict[str, list[int]] = {}
    for i, node in enumerate(spec.nodes):
        if node.op not in PRIMITIVES and node.op not in BUILDERS:
            unknown.setdefault(node.op, []).append(i)
    if not unknown:
        return
    first = spec.nodes[min(i for uses in unknown.values() for i in uses)]
    if len(unknown) == 1 and len(next(iter(unknown.values()))) == 1 and first.loc.line:
        i = next(iter(unknown.values()))[0]
        raise GraphError(first.op_loc, f"unknown op '{first.op}' in node '{names[i]}'",
                         _unknown_op_hint(first.op))

    def uses(op: str, indices: list[int]) -> str:
        shown = ", ".join(f"'{names[i]}'" for i in indices[:MAX_LISTED_NODES])
        more = f" and {len(indices) - MAX_LISTED_NODES} more" if len(indices) > MAX_LISTED_NODES else ""
        return f"{op} (node{'s' * (len(indices) > 1)} {shown}{more})"
    listed = "; ".join(uses(op, indices) for op, indices in unknown.items())
    count = f"{len(unknown)} operators" if len(unknown) > 1 else "an operator"
    raise GraphError(first.op_loc, f"the graph uses {count} Tinsmith does not support: {listed}",
                     "`python -m tinsmith ops` lists the supported ops; to add one, register a primitive "
                     "(tinsmith.ops.registry.define) with a functor (tinsmith.generate.CPP.register), or a "
                     "builder composing supported ops (tinsmith.builders.builder)")


def _unknown_op_hint(op: str) -> str:
    known = {name.lower(): name for name in set(PRIMITIVES) | set(BUILDERS)}
    close = [known[c] for c in difflib.get_close_matches(op.lower(), sorted(known), n=3, cutoff=0.7)]
    if close:
        return f"did you mean {' or '.join(repr(c) for c in close)}?"
    return "run `python -m tinsmith ops` to list the supported ops"


def _check_names(spec: GraphSpec) -> dict[str, SourceLoc]:
    """Every value is defined once; returns where each value is defined."""
    defined: dict[str, SourceLoc] = {}

    def define(name: str, loc: SourceLoc) -> None:
        if name in defined:
            first = defined[name]
            raise GraphError(loc, f"duplicate value name '{name}'",
                             f"'{name}' is already defined {_at(first)}")
        defined[name] = loc

    for v in spec.inputs:
        define(v.name, v.loc)
    for c in spec.constants:
        define(c.name, c.loc)
    for node in spec.nodes:
        for out, loc in zip(node.outputs, node.output_locs):
            define(out, loc)
    return defined


def _node_names(spec: GraphSpec, values: Mapping[str, SourceLoc]) -> list[str]:
    """Explicit node names, checked unique; unnamed nodes are named after op and first output."""
    names: list[str | None] = []
    seen: dict[str, SourceLoc] = {}
    for node in spec.nodes:
        if node.name is not None:
            if node.name in seen:
                raise GraphError(node.name_loc or node.loc, f"duplicate node name '{node.name}'",
                                 f"'{node.name}' already names the node {_at(seen[node.name])}")
            seen[node.name] = node.name_loc or node.loc
        names.append(node.name)
    taken = set(seen) | set(values)
    result = []
    for node, name in zip(spec.nodes, names):
        if name is None:
            op = node.op.lower().replace(".", "_")  # a domain's op: ai.onnx.ml.Binarizer
            base = f"{op}_{node.outputs[0]}" if node.outputs else op
            name = numbered(base, taken)
            taken.add(name)
        result.append(name)
    return result


def _dependency_order(spec: GraphSpec, names: list[str]) -> list[int]:
    """Indices of the graph file's nodes in dependency order (file order where free); cycles are errors."""
    producer = {out: i for i, n in enumerate(spec.nodes) for out in n.outputs}
    done: set[int] = set()
    order: list[int] = []
    for root in range(len(spec.nodes)):
        if root in done:
            continue
        # Depth-first without recursion (graphs may be long chains): a stack of (node, next input).
        stack: list[tuple[int, int]] = [(root, 0)]
        active = {root}
        while stack:
            i, k = stack[-1]
            inputs = spec.nodes[i].inputs
            if k == len(inputs):
                stack.pop()
                active.discard(i)
                done.add(i)
                order.append(i)
                continue
            stack[-1] = (i, k + 1)
            j = producer.get(inputs[k])
            if j is None or j in done:
                continue
            if j in active:
                path = [n for n, _ in stack]
                cycle = path[path.index(j):] + [j]
                shown = " -> ".join(names[n] for n in cycle)
                raise GraphError(spec.nodes[j].loc, f"the graph has a cycle: {shown}",
                                 "a value cannot depend on itself")
            stack.append((j, 0))
            active.add(j)
    return order


def expand_graph(spec: GraphSpec) -> Graph:
    """Check and type every node, expand builders, and return a Graph of primitives."""
    defined = _check_names(spec)
    names = _node_names(spec, defined)
    _unsupported_ops(spec, names)
    for node, name in zip(spec.nodes, names):
        for value, loc in zip(node.inputs, node.input_locs):
            if value and value not in defined:
                close = difflib.get_close_matches(value, list(defined), n=1)
                raise GraphError(loc, f"unknown value '{value}' (input of node '{name}')",
                                 f"did you mean '{close[0]}'?" if close
                                 else "inputs must be graph inputs, constants or node outputs")
    produced = {v for n in spec.nodes for v in n.outputs}
    for out in spec.outputs:
        if out.name not in produced:
            hint = ("to pass it through, add a node {op: Identity, inputs: [%s], outputs: [NAME]}"
                    % out.name if out.name in defined else "list the value a node writes in its 'outputs'")
            raise GraphError(out.loc, f"graph output '{out.name}' is never produced by any node", hint)

    builder = GraphBuilder(spec, set(defined) | set(names))
    for i in _dependency_order(spec, names):
        builder.add_spec_node(spec.nodes[i], names[i])

    for out in spec.outputs:
        inferred = builder.types[out.name]
        if out.type is not None and out.type != inferred:
            raise GraphError(out.type_loc or out.loc,
                             f"output '{out.name}' is declared {out.type}, but the graph computes {inferred}",
                             "correct the declared type, or give only the name to use the inferred one")
    used = {v for n in builder.nodes for v in n.inputs}
    constants = {k: c for k, c in builder.constants.items() if k in used}
    return Graph(spec.name, tuple(v.name for v in spec.inputs), tuple(v.name for v in spec.outputs),
                 dict(builder.types), constants, tuple(builder.nodes), spec.path, tuple(spec.states))
