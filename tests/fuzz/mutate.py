"""Mutations: hostile variants of graph files, weight files and ONNX models.

Each mutator takes a seeded random.Random and the seed material and returns new material; the
harness writes it to a case folder. Mutations aim at what a hostile file would try: values of the
wrong kind, sizes far over any limit, names that are keywords, too long or not text, YAML
aliases, corrupt archives, and ONNX protos whose attributes or tensors lie.
"""
from __future__ import annotations

import copy
import io
import random
import zipfile
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

# Values a hostile file puts where another value belongs.
HOSTILE_VALUES: list[Any] = [
    0, -1, 1, 2, 3, 2**31, 2**31 - 1, 2**32 + 1, 2**63, -2**63, 10**30, 1e308, -1e-308, float("nan"),
    float("inf"), True, None, "", "x", "all", "int", "main", "EOF", "NULL", "v" * 1100, "a\nb", "*/ x /*",
    "\u00e9t\u00e9", "\x7f", [], [0], [-1], [2**31], [1, 2**20, 2**20], [[1, 2], [3]], {}, {"a": 1},
    [1] * 9, [100000, 100000], "../../../etc/passwd", "/dev/zero", "weights", "float32", "int64",
]


def _walk(doc: Any, path: tuple = ()):
    """Every (path, value) in a YAML document tree."""
    yield path, doc
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _walk(v, path + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _walk(v, path + (i,))


def _set(doc: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    parent = doc
    for p in path[:-1]:
        parent = parent[p]
    parent[path[-1]] = value
    return doc


def mutate_tree(rng: random.Random, doc: Any) -> Any:
    """Replace, delete or duplicate one node of a parsed graph file."""
    doc = copy.deepcopy(doc)
    places = list(_walk(doc))
    path, value = rng.choice(places)
    action = rng.random()
    if action < 0.55 or not path:
        return _set(doc, path, copy.deepcopy(rng.choice(HOSTILE_VALUES)))
    parent = doc
    for p in path[:-1]:
        parent = parent[p]
    if action < 0.75:
        del parent[path[-1]]
    elif isinstance(parent, list):
        parent.insert(path[-1], copy.deepcopy(value))
    elif isinstance(value, int) and not isinstance(value, bool):
        parent[path[-1]] = value * rng.choice([0, -1, 2**16, 2**31])
    elif isinstance(value, list) and value:
        parent[path[-1]] = value * rng.choice([2, 64])
    else:
        parent[path[-1]] = rng.choice(HOSTILE_VALUES)
    return doc


def nudge_tree(rng: random.Random, doc: Any) -> Any:
    """A small, often still valid change: one integer or float of the file set to a nearby value
    (a seed, a scale, a dimension, an attribute), so that generation succeeds and its code is checked."""
    doc = copy.deepcopy(doc)
    numbers = [(p, v) for p, v in _walk(doc) if isinstance(v, (int, float)) and not isinstance(v, bool) and p]
    if not numbers:
        return doc
    path, value = rng.choice(numbers)
    if isinstance(value, int):
        new: Any = max(0, value + rng.choice([-2, -1, 1, 2, 3])) if rng.random() < 0.8 else rng.randint(1, 8)
    else:
        new = value * rng.choice([0.5, 2.0, -1.0, 0.0])
    return _set(doc, path, new)


def mutate_text(rng: random.Random, text: str) -> str:
    """Line and character level damage to YAML text."""
    lines = text.splitlines()
    action = rng.randrange(8)
    i = rng.randrange(len(lines)) if lines else 0
    if action == 0 and lines:
        del lines[i]
    elif action == 1 and lines:
        lines.insert(i, lines[rng.randrange(len(lines))])
    elif action == 2:
        text = text[:rng.randrange(len(text) + 1)]
        return text
    elif action == 3:
        pos = rng.randrange(len(text) + 1)
        return text[:pos] + rng.choice(["\t", "\x00", "\x1b", "&a ", "*a", "<<: *a", "!!python/object:os.system ",
                                        "\ufeff", "---\n", ": ", "{", "]", "'", "\\", "%YAML 1.1\n"]) + text[pos:]
    elif action == 4 and lines:
        lines[i] = lines[i].replace(" ", "  ", 1)
    elif action == 5:
        lines.append(alias_bomb(rng.randint(3, 9)))
    elif action == 6 and lines:
        j = rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    else:
        digits = [k for k, c in enumerate(text) if c.isdigit()]
        if digits:
            k = rng.choice(digits)
            return text[:k] + rng.choice(["9999999999", "-", "0", "1e30", ".5", "0x10"]) + text[k + 1:]
    return "\n".join(lines) + "\n"


def alias_bomb(levels: int) -> str:
    """A constants entry whose value is a chain of aliases (ten copies per level)."""
    rows = ["bomb_constants:", "  a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    rows += [f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, levels)]
    return "\n".join(rows)


def bomb_graph(levels: int) -> str:
    """A whole graph file whose constant `value` is an alias bomb."""
    rows = ["graph: bomb", "inputs: {x: {dtype: float32, shape: [1]}}", "outputs: [y]", "constants:",
            "  c0: {value: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]}"]
    rows += [f"  c{i}: {{value: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]}}" for i in range(1, levels)]
    rows += ["nodes:", "  - {op: Relu, inputs: [x], outputs: [y]}"]
    return "\n".join(rows) + "\n"


# --- weight files ---------------------------------------------------------------------------
def _npy(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.lib.format.write_array(out, array, allow_pickle=False)
    return out.getvalue()


def hostile_array(rng: random.Random, like: np.ndarray) -> bytes:
    """The .npy bytes of an array that is wrong in some way, or of a header that lies."""
    kind = rng.randrange(9)
    if kind == 0:
        return _npy(np.full(like.shape, np.nan, np.float32))
    if kind == 1:
        return _npy(np.zeros((0,) + like.shape[1:], np.float32))
    if kind == 2:
        return _npy(like.astype(rng.choice([np.float16, np.complex64, np.bool_, np.uint8, np.int8])))
    if kind == 3:
        return _npy(like.reshape(-1)[: max(1, like.size // 2)].copy())
    if kind == 4:  # a header declaring a huge shape over a few bytes of data
        header = {"descr": "<f4", "fortran_order": False, "shape": (2**20, 2**20)}
        out = io.BytesIO()
        np.lib.format.write_array_header_1_0(out, header)
        return out.getvalue() + b"\0" * 64
    if kind == 5:
        return _npy(np.array(["text"] * 3))
    if kind == 6:
        data = bytearray(_npy(like))
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data)
    if kind == 7:
        return _npy(like)[: rng.randrange(1, 80)]
    return _npy(np.full(like.shape, 3.0e38, np.float64) * 10)


def mutate_npz(rng: random.Random, arrays: dict[str, np.ndarray]) -> bytes:
    """An .npz archive with one array replaced by a hostile one, or the archive damaged."""
    out = io.BytesIO()
    names = sorted(arrays)
    victim = rng.choice(names)
    with zipfile.ZipFile(out, "w", rng.choice([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])) as z:
        for name in names:
            data = hostile_array(rng, arrays[name]) if name == victim else _npy(arrays[name])
            entry = f"{name}.npy" if rng.random() > 0.05 else f"{name}\n// x.npy"
            z.writestr(entry, data)
    data = bytearray(out.getvalue())
    if rng.random() < 0.2:
        for _ in range(rng.randint(1, 16)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    if rng.random() < 0.1:
        data = data[: rng.randrange(len(data))]
    return bytes(data)


# --- ONNX models ----------------------------------------------------------------------------
def _hostile_attribute(rng: random.Random, name: str) -> onnx.AttributeProto:
    choice = rng.randrange(6)
    if choice == 0:
        return helper.make_attribute(name, rng.choice(["abc", "", "\xff"]))
    if choice == 1:
        return helper.make_attribute(name, rng.choice([2**40, -2**40, 0, -1]))
    if choice == 2:
        return helper.make_attribute(name, [rng.choice([0, -1, 2**31, 2**40, 3]) for _ in range(rng.randint(1, 6))])
    if choice == 3:
        return helper.make_attribute(name, [1.5, float("nan")])
    if choice == 4:
        return helper.make_attribute(name, helper.make_tensor("t", TensorProto.FLOAT, [2], [1.0, 2.0]))
    return helper.make_attribute(name, 1.0)


def mutate_onnx(rng: random.Random, model: onnx.ModelProto) -> bytes:
    """A damaged copy of `model`, serialised (some damage exists only in the bytes)."""
    m = copy.deepcopy(model)
    g = m.graph
    action = rng.randrange(14)
    if action == 0 and g.node:  # an attribute of the wrong type or size
        node = rng.choice(g.node)
        names = [a.name for a in node.attribute] or ["split", "axis", "pads", "kernel_shape", "value"]
        name = rng.choice(names)
        kept = [a for a in node.attribute if a.name != name]
        del node.attribute[:]
        node.attribute.extend(kept + [_hostile_attribute(rng, name)])
    elif action == 1:  # no outputs, or an output twice
        if rng.random() < 0.5:
            del g.output[:]
        elif g.output:
            g.output.append(copy.deepcopy(g.output[0]))
    elif action == 2 and g.initializer:  # an initializer whose data lies about its size
        t = rng.choice(g.initializer)
        t.raw_data = t.raw_data[: rng.randrange(len(t.raw_data) + 1)] if t.raw_data else b"\x01\x02\x03"
        if rng.random() < 0.5:
            t.dims[:] = [rng.choice([0, 2**31, 2**20])] + list(t.dims[1:])
    elif action == 3:  # an old opset: the version converter runs
        m.opset_import[0].version = rng.choice([7, 9, 11, 13])
    elif action == 4 and g.node:  # names that are not identifiers, or very long
        target = rng.choice(g.node)
        target.name = rng.choice(["all", "int", "a" * 300, "x\ny", "*/", "", "1x", "\u00e9"])
        if rng.random() < 0.5 and target.output:
            old = target.output[0]
            new = rng.choice(["v" * 1100, "main", "NULL", "a b", "x__y"])
            for n in g.node:
                n.input[:] = [new if i == old else i for i in n.input]
            target.output[0] = new
            for o in g.output:
                if o.name == old:
                    o.name = new
    elif action == 5:  # a recursive model-local function
        f = helper.make_function("local", "F", ["a"], ["b"], [helper.make_node("F", ["a"], ["b"], domain="local")],
                                 [helper.make_opsetid("", 18)])
        m.functions.append(f)
        m.opset_import.append(helper.make_opsetid("local", 1))
        if g.node:
            n = g.node[0]
            g.node.insert(0, helper.make_node("F", [n.input[0]], ["f_out"], domain="local"))
    elif action == 6 and g.input:  # input shapes: zero, negative, huge, symbolic
        dims = g.input[0].type.tensor_type.shape.dim
        if dims:
            d = rng.choice(dims)
            choice = rng.randrange(3)
            if choice == 0:
                d.dim_value = rng.choice([0, 2**31, 2**40, 10**6])
            elif choice == 1:
                d.dim_param = "N"
            else:
                d.Clear()
    elif action == 7 and g.node:  # a Constant node with the wrong attribute
        const = helper.make_node("Constant", [], ["k_out"])
        const.attribute.append(_hostile_attribute(rng, rng.choice(["value", "value_float", "value_ints", "value_int"])))
        g.node.insert(0, const)
        if rng.random() < 0.3:
            g.node[-1].input.append("k_out")
    elif action == 8 and g.initializer:  # NaN, empty, huge or odd-typed initializer
        t = rng.choice(g.initializer)
        kind = rng.randrange(4)
        if kind == 0:
            t.CopyFrom(onnx.numpy_helper.from_array(np.full(list(t.dims), np.nan, np.float32), t.name))
        elif kind == 1:
            t.CopyFrom(onnx.numpy_helper.from_array(np.zeros([0], np.float32), t.name))
        elif kind == 2:
            t.data_type = rng.choice([TensorProto.STRING, TensorProto.COMPLEX64, TensorProto.FLOAT16, 0, 99])
        else:
            t.data_location = TensorProto.EXTERNAL
            t.external_data.add(key="location", value=rng.choice(["/etc/passwd", "../x.bin", "missing.bin"]))
    elif action == 9:  # a huge graph of Identity nodes, or a cycle
        if rng.random() < 0.5 and g.node:
            a = g.node[0]
            a.input[0] = g.node[-1].output[0]
        else:
            for i in range(200):
                g.node.append(helper.make_node("Identity", [f"i{i}" if i else g.node[-1].output[0]], [f"i{i + 1}"]))
    elif action == 10 and g.node:  # an unknown op or domain
        node = rng.choice(g.node)
        node.op_type = rng.choice(["Unknown", "Loop", "If", "Scan", "NonMaxSuppression", ""])
        if rng.random() < 0.3:
            node.domain = "com.evil"
    elif action == 11 and g.node:  # a subgraph attribute
        node = rng.choice(g.node)
        node.attribute.append(helper.make_attribute("body", helper.make_graph([], "b", [], [])))
    elif action == 12:  # graph and producer strings
        m.producer_name = rng.choice(["x\nconstants:\n  w: {file: /etc/passwd}", "*/", "a" * 5000])
        g.name = "g" * 300
    data = bytearray(m.SerializeToString())
    if action == 13 or rng.random() < 0.1:  # bytes damaged below the proto level
        for _ in range(rng.randint(1, 10)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    if rng.random() < 0.03:
        data = data[: rng.randrange(len(data))]
    return bytes(data)


