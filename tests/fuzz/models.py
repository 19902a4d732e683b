"""Small random ONNX models: valid ones for the differential test against ONNX Runtime, and the
seeds that the ONNX mutations start from. Written with onnx.helper only; nothing from tinsmith."""
from __future__ import annotations

import random

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 18


class _Builder:
    """A model under construction: a chain of ops on one running value, with side inputs."""

    def __init__(self, rng: random.Random, shape: list[int]):
        self.rng = rng
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.shape = list(shape)
        self.value = "x"
        self.count = 0
        self.np_rng = np.random.default_rng(rng.randrange(1 << 30))

    def fresh(self, hint: str) -> str:
        self.count += 1
        return f"{hint}{self.count}"

    def weight(self, shape: list[int], scale: float = 0.5) -> str:
        name = self.fresh("w")
        data = (self.np_rng.standard_normal(shape) * scale).astype(np.float32)
        self.inits.append(numpy_helper.from_array(data, name))
        return name

    def ints(self, values, name_hint: str = "s") -> str:
        name = self.fresh(name_hint)
        self.inits.append(numpy_helper.from_array(np.array(values, np.int64), name))
        return name

    def add(self, op: str, inputs: list[str], shape: list[int], **attrs) -> None:
        out = self.fresh(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=f"n{self.count}", **attrs))
        self.value, self.shape = out, list(shape)


def _window(rng: random.Random, size: int, transposed: bool = False, dilate: bool = True):
    """kernel, stride, dilation, pad_begin, pad_end for one axis of length `size` (valid for ONNX)."""
    for _ in range(50):
        k, s, d = rng.randint(1, 4), rng.randint(1, 3), rng.choice([1, 1, 1, 2]) if dilate else 1
        pb, pe = rng.randint(0, k - 1), rng.randint(0, k - 1)  # (ONNX Runtime's pools want pads < kernel)
        extent = d * (k - 1) + 1
        if transposed:
            out = s * (size - 1) + extent - pb - pe
            if out >= 1 and pb < extent and pe < extent:
                return k, s, d, pb, pe, out
        elif size + pb + pe >= extent and pb < extent and pe < extent:
            return k, s, d, pb, pe, (size + pb + pe - extent) // s + 1
    return 1, 1, 1, 0, 0, size


def _spatial(b: _Builder, op: str) -> None:
    rng = b.rng
    n, c, *spatial = b.shape
    windows = [_window(rng, size, transposed=op == "ConvTranspose", dilate=op != "AveragePool")
               for size in spatial]  # (AveragePool has dilations from opset 19 on)
    kernel = [w[0] for w in windows]
    attrs = dict(kernel_shape=kernel, strides=[w[1] for w in windows],
                 pads=[w[3] for w in windows] + [w[4] for w in windows])
    attrs["dilations"] = [w[2] for w in windows]
    out_spatial = [w[5] for w in windows]
    if op == "Conv":
        group = rng.choice([g for g in (1, c) if c % g == 0])
        m = c if group == c and rng.random() < 0.5 else rng.randint(1, 4) * group
        inputs = [b.value, b.weight([m, c // group] + kernel)]
        if rng.random() < 0.5:
            inputs.append(b.weight([m]))
        b.add("Conv", inputs, [n, m] + out_spatial, group=group, **attrs)
    elif op == "ConvTranspose":
        m = rng.randint(1, 3)
        inputs = [b.value, b.weight([c, m] + kernel)]
        if rng.random() < 0.5:
            inputs.append(b.weight([m]))
        b.add("ConvTranspose", inputs, [n, m] + out_spatial, **attrs)
    else:
        if op == "AveragePool":
            attrs["count_include_pad"] = rng.randint(0, 1)
            del attrs["dilations"]
        b.add(op, [b.value], [n, c] + out_spatial, **attrs)


def _elementwise(b: _Builder) -> None:
    op = b.rng.choice(["Relu", "Sigmoid", "Tanh", "Abs", "Neg", "Add", "Mul", "Sub"])
    if op in ("Add", "Mul", "Sub"):
        other = b.weight(b.shape[1:] if b.rng.random() < 0.5 else [1] * len(b.shape))
        b.add(op, [b.value, other], b.shape)
    else:
        b.add(op, [b.value], b.shape)


def random_model(rng: random.Random) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A valid random model (1-D or 2-D convolutions and pools, elementwise ops, then a flatten and
    a matrix product or a reduction) and seeded inputs for it."""
    rank = rng.choice([3, 4])
    shape = [1, rng.randint(1, 4)] + [rng.randint(1, 9) for _ in range(rank - 2)]
    b = _Builder(rng, shape)
    for _ in range(rng.randint(1, 4)):
        kind = rng.random()
        if kind < 0.35:
            _spatial(b, "Conv")
        elif kind < 0.55:
            _spatial(b, "ConvTranspose")
        elif kind < 0.7:
            _spatial(b, rng.choice(["MaxPool", "AveragePool"]))
        else:
            _elementwise(b)
    tail = rng.random()
    if tail < 0.4:
        flat = int(np.prod(b.shape))
        b.add("Reshape", [b.value, b.ints([1, flat])], [1, flat])
        k = rng.randint(1, 6)
        if rng.random() < 0.5:
            b.add("MatMul", [b.value, b.weight([flat, k])], [1, k])
        else:
            b.add("Gemm", [b.value, b.weight([k, flat]), b.weight([k])], [1, k], transB=1)
        if rng.random() < 0.5:
            b.add("Softmax", [b.value], [1, k], axis=-1)
    elif tail < 0.6:
        b.add("ReduceMean", [b.value, b.ints([1])], [b.shape[0], 1] + b.shape[2:], keepdims=1)
    graph = helper.make_graph(
        b.nodes, "random", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(b.value, TensorProto.FLOAT, b.shape)], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="fuzz")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    inputs = {"x": np.random.default_rng(rng.randrange(1 << 30)).standard_normal(shape).astype(np.float32)}
    return model, inputs


def onnxruntime_outputs(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The model's outputs as ONNX Runtime computes them."""
    import onnxruntime as ort
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, inputs)


def summation_length(model: onnx.ModelProto) -> int:
    """A bound on how many terms meet in one output (for the float32 tolerance): the sum over the
    nodes of the weights' reduction sizes (or windows), as in `check`."""
    shapes = {t.name: list(t.dims) for t in model.graph.initializer}
    total = 0
    for node in model.graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type in ("Conv", "ConvTranspose", "MatMul", "Gemm") and node.input[1] in shapes:
            w = shapes[node.input[1]]
            total += int(np.prod(w[1:])) if node.op_type != "MatMul" else w[0]
            if node.op_type == "ConvTranspose":
                total += int(np.prod(w)) // max(1, w[1])
        elif "kernel_shape" in attrs:
            total += int(np.prod(attrs["kernel_shape"]))
        else:
            total += 8  # softmax, reductions: short sums here
    return max(1, total)
