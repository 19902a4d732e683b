"""The four MLPerf Tiny reference architectures as ONNX files with seeded weights.

    python models/make_models.py            # writes models/NAME.onnx, checks each, prints a table
    python models/make_models.py -o DIR     # writes DIR/NAME.onnx instead

Models (float32, batch 1, static shapes, opset 17, BatchNormalization left in):
  kws_dscnn       DS-CNN keyword spotting, 1x1x49x10 MFCC -> 12 class probabilities
  vww_mobilenet   MobileNetV1 width 0.25 visual wake words, 1x3x96x96 -> 2 class probabilities
  ic_resnet8      ResNet-8 image classification (CIFAR-10), 1x3x32x32 -> 10 class probabilities
  ad_autoencoder  fully connected anomaly-detection autoencoder, 1x640 -> 640 reconstruction

Layers follow the MLPerf Tiny training scripts (Keras): convolutions and dense layers have a
bias, 'same' padding is TensorFlow's (the extra row/column of an odd total goes at the end, so
stride-2 layers have asymmetric pads), BatchNormalization uses Keras' epsilon 1e-3.

Weights are not trained but are not arbitrary either: He-normal kernels, small non-zero
biases, and BatchNormalization statistics calibrated on a seeded batch (then perturbed, as
running statistics never match one batch exactly), so activations keep a realistic scale
through every layer and the outputs are neither saturated nor uniform. Everything derives
from fixed seeds and is computed in float64 NumPy, so the files are byte-for-byte the same
on every run; the calibrated statistics are rounded to 4 significant digits so that BLAS
rounding differences between machines cannot change them.

`evaluate` is an independent float64 NumPy forward pass of the same layers: the files are
checked against it through ONNX Runtime.
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
from numpy.lib.stride_tricks import sliding_window_view
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8  # what opset 17 shipped with: readable by older runtimes and importers too
BN_EPSILON = 1e-3  # Keras' default, which the MLPerf Tiny models were trained with
# Samples for the BatchNormalization statistics: per channel, a conv layer sees batch x H x W
# values but a dense layer only `batch`, too few for a stable variance at 8.
CALIBRATION_BATCH = {4: 8, 2: 512}  # by input rank
HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Layer:
    """One ONNX node: op type, node name, value names, attributes."""

    op: str
    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: dict = field(default_factory=dict)


class Net:
    """A model under construction: layers in topological order, their weights and value shapes.

    Each method adds one node, named `name`, whose output value is `name + "_out"`, and
    returns that value's name."""

    def __init__(self, name: str, doc: str, input_name: str, shape: tuple[int, ...], seed: int,
                 input_kind: str):
        self.name, self.doc = name, doc
        self.input_name, self.input_kind = input_name, input_kind
        self.layers: list[Layer] = []
        self.weights: dict[str, np.ndarray] = {}
        self.shapes: dict[str, tuple[int, ...]] = {input_name: tuple(shape)}
        self.bn_noise: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.output_name = ""
        self.rng = np.random.default_rng(seed)

    def _add(self, op, name, inputs, shape, attrs=None, output=None) -> str:
        out = output or f"{name}_out"
        self.layers.append(Layer(op, name, tuple(inputs), (out,), dict(attrs or {})))
        self.shapes[out] = tuple(shape)
        return out

    def _weight(self, name: str, data: np.ndarray) -> str:
        self.weights[name] = np.asarray(data, dtype=np.float32)
        return name

    def conv(self, name, x, cout, kernel, stride=1, group=1) -> str:
        """Conv with a bias and TensorFlow 'same' padding."""
        n, cin, h, w = self.shapes[x]
        kh, kw = kernel
        pads_begin, pads_end, out_hw = [], [], []
        for size, k in ((h, kh), (w, kw)):
            out = -(-size // stride)
            total = max((out - 1) * stride + k - size, 0)
            pads_begin.append(total // 2)
            pads_end.append(total - total // 2)
            out_hw.append(out)
        fan_in = cin // group * kh * kw
        wname = self._weight(f"{name}_w", self.rng.normal(0, math.sqrt(2 / fan_in), (cout, cin // group, kh, kw)))
        bname = self._weight(f"{name}_b", self.rng.normal(0, 0.05, cout))
        attrs = {"kernel_shape": [kh, kw], "strides": [stride, stride], "pads": pads_begin + pads_end,
                 "dilations": [1, 1], "group": group}
        return self._add("Conv", name, [x, wname, bname], (n, cout, *out_hw), attrs)

    def gemm(self, name, x, units, output=None) -> str:
        """Dense layer as PyTorch exports it: Gemm with W stored [out, in] and transB=1."""
        n, fan_in = self.shapes[x]
        wname = self._weight(f"{name}_w", self.rng.normal(0, math.sqrt(2 / fan_in), (units, fan_in)))
        bname = self._weight(f"{name}_b", self.rng.normal(0, 0.05, units))
        return self._add("Gemm", name, [x, wname, bname], (n, units), {"transB": 1}, output)

    def bn(self, name, x) -> str:
        """BatchNormalization (inference); mean and var are filled in by `calibrate`."""
        c = self.shapes[x][1]
        scale = self._weight(f"{name}_scale", self.rng.uniform(0.5, 1.5, c))
        bias = self._weight(f"{name}_bias", self.rng.normal(0.0, 0.25, c))
        mean = self._weight(f"{name}_mean", np.zeros(c))
        var = self._weight(f"{name}_var", np.ones(c))
        # drawn now, so the random stream does not depend on the calibration
        self.bn_noise[name] = (self.rng.normal(0.0, 0.1, c), self.rng.uniform(0.8, 1.25, c))
        return self._add("BatchNormalization", name, [x, scale, bias, mean, var], self.shapes[x],
                         {"epsilon": BN_EPSILON})

    def relu(self, name, x) -> str:
        return self._add("Relu", name, [x], self.shapes[x])

    def add(self, name, a, b) -> str:
        return self._add("Add", name, [a, b], self.shapes[a])

    def global_average_pool(self, name, x) -> str:
        n, c = self.shapes[x][:2]
        return self._add("GlobalAveragePool", name, [x], (n, c, 1, 1))

    def average_pool(self, name, x, kernel) -> str:
        n, c, h, w = self.shapes[x]
        return self._add("AveragePool", name, [x], (n, c, h // kernel[0], w // kernel[1]),
                         {"kernel_shape": list(kernel), "strides": list(kernel)})

    def flatten(self, name, x) -> str:
        n, *rest = self.shapes[x]
        return self._add("Flatten", name, [x], (n, math.prod(rest)), {"axis": 1})

    def softmax(self, name, x, output) -> str:
        return self._add("Softmax", name, [x], self.shapes[x], {"axis": -1}, output)

    def finish(self, output: str) -> "Net":
        self.output_name = output
        return self


# --- the four architectures ------------------------------------------------------------------

def kws_dscnn() -> Net:
    """DS-CNN (MLPerf Tiny keyword spotting): conv 10x4/2, four depthwise-separable blocks."""
    net = Net("kws_dscnn", "MLPerf Tiny keyword spotting DS-CNN: 49x10 MFCC -> 12 keywords",
              "mfcc", (1, 1, 49, 10), seed=101, input_kind="normal")
    x = net.relu("relu1", net.bn("bn1", net.conv("conv1", "mfcc", 64, (10, 4), stride=2)))
    for i in range(1, 5):
        x = net.relu(f"dw{i}_relu", net.bn(f"dw{i}_bn", net.conv(f"dw{i}", x, 64, (3, 3), group=64)))
        x = net.relu(f"pw{i}_relu", net.bn(f"pw{i}_bn", net.conv(f"pw{i}", x, 64, (1, 1))))
    x = net.flatten("flatten", net.global_average_pool("pool", x))
    return net.finish(net.softmax("softmax", net.gemm("fc", x, 12), "probs"))


# (output channels, stride) of MobileNetV1's 13 depthwise-separable blocks at width 1/4
MOBILENET_BLOCKS = ((16, 1), (32, 2), (32, 1), (64, 2), (64, 1), (128, 2),
                    (128, 1), (128, 1), (128, 1), (128, 1), (128, 1), (256, 2), (256, 1))


def vww_mobilenet() -> Net:
    """MobileNetV1 width 0.25 (MLPerf Tiny visual wake words): 96x96 RGB -> person / no person."""
    net = Net("vww_mobilenet", "MLPerf Tiny visual wake words MobileNetV1 0.25: 96x96 RGB -> 2 classes",
              "image", (1, 3, 96, 96), seed=202, input_kind="uniform")
    x = net.relu("relu1", net.bn("bn1", net.conv("conv1", "image", 8, (3, 3), stride=2)))
    for i, (cout, stride) in enumerate(MOBILENET_BLOCKS, start=1):
        cin = net.shapes[x][1]
        x = net.relu(f"dw{i}_relu", net.bn(f"dw{i}_bn", net.conv(f"dw{i}", x, cin, (3, 3), stride, group=cin)))
        x = net.relu(f"pw{i}_relu", net.bn(f"pw{i}_bn", net.conv(f"pw{i}", x, cout, (1, 1))))
    x = net.flatten("flatten", net.global_average_pool("pool", x))
    return net.finish(net.softmax("softmax", net.gemm("fc", x, 2), "probs"))


def ic_resnet8() -> Net:
    """ResNet-8 (MLPerf Tiny image classification): 32x32 RGB -> 10 CIFAR-10 classes."""
    net = Net("ic_resnet8", "MLPerf Tiny image classification ResNet-8: 32x32 RGB -> 10 classes",
              "image", (1, 3, 32, 32), seed=303, input_kind="uniform")
    x = net.relu("relu1", net.bn("bn1", net.conv("conv1", "image", 16, (3, 3))))
    for s, (cout, stride) in enumerate(((16, 1), (32, 2), (64, 2)), start=1):
        y = net.relu(f"s{s}_relu1", net.bn(f"s{s}_bn1", net.conv(f"s{s}_conv1", x, cout, (3, 3), stride)))
        y = net.bn(f"s{s}_bn2", net.conv(f"s{s}_conv2", y, cout, (3, 3)))
        # the MLPerf model's shortcut is a plain 1x1 convolution, without BatchNormalization
        shortcut = x if stride == 1 else net.conv(f"s{s}_shortcut", x, cout, (1, 1), stride)
        x = net.relu(f"s{s}_relu2", net.add(f"s{s}_add", y, shortcut))
    x = net.flatten("flatten", net.average_pool("pool", x, net.shapes[x][2:]))
    return net.finish(net.softmax("softmax", net.gemm("fc", x, 10), "probs"))


def ad_autoencoder() -> Net:
    """The MLPerf Tiny anomaly-detection autoencoder: 640 -> 128 x4 -> 8 -> 128 x4 -> 640."""
    net = Net("ad_autoencoder", "MLPerf Tiny anomaly detection autoencoder: 640 log-mel features "
              "(5 frames x 128 bins) -> reconstruction", "features", (1, 640), seed=404, input_kind="normal")
    x = "features"
    layers = [f"enc{i}" for i in range(1, 5)] + ["bottleneck"] + [f"dec{i}" for i in range(1, 5)]
    for name in layers:
        units = 8 if name == "bottleneck" else 128
        x = net.relu(f"{name}_relu", net.bn(f"{name}_bn", net.gemm(name, x, units)))
    return net.finish(net.gemm("out", x, 640, output="reconstruction"))


ARCHITECTURES: dict[str, Callable[[], Net]] = {
    "kws_dscnn": kws_dscnn, "vww_mobilenet": vww_mobilenet,
    "ic_resnet8": ic_resnet8, "ad_autoencoder": ad_autoencoder,
}


# --- inputs, forward pass, calibration -------------------------------------------------------

def sample_input(net: Net, seed: int, batch: int = 1) -> np.ndarray:
    """Seeded float32 input: standard normal features (MFCC, log-mel), or pixels in [0, 1)."""
    rng = np.random.default_rng(seed)
    shape = (batch, *net.shapes[net.input_name][1:])
    data = rng.standard_normal(shape) if net.input_kind == "normal" else rng.random(shape)
    return data.astype(np.float32)


def _conv(x, w, b, a):
    (kh, kw), (sh, sw), (pt, pl, pb, pr), g = a["kernel_shape"], a["strides"], a["pads"], a["group"]
    x = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    windows = sliding_window_view(x, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw]
    n, c, ho, wo = windows.shape[:4]
    windows = windows.reshape(n, g, c // g, ho, wo, kh, kw)
    kernel = w.reshape(g, w.shape[0] // g, c // g, kh, kw)
    y = np.einsum("ngchwij,gmcij->ngmhw", windows, kernel, optimize=True)
    return y.reshape(n, w.shape[0], ho, wo) + b[None, :, None, None]


def _bn(x, scale, bias, mean, var, a):
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return ((x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + a["epsilon"]) * scale.reshape(shape)
            + bias.reshape(shape))


def _softmax(x, a):
    e = np.exp(x - x.max(axis=a["axis"], keepdims=True))
    return e / e.sum(axis=a["axis"], keepdims=True)


def _average_pool(x, a):
    (kh, kw), (sh, sw) = a["kernel_shape"], a["strides"]
    return sliding_window_view(x, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw].mean(axis=(4, 5))


_FORWARD = {
    "Conv": _conv,
    "Gemm": lambda x, w, b, a: x @ w.T + b,
    "BatchNormalization": _bn,
    "Relu": lambda x, a: np.maximum(x, 0.0),
    "Add": lambda x, y, a: x + y,
    "GlobalAveragePool": lambda x, a: x.mean(axis=(2, 3), keepdims=True),
    "AveragePool": _average_pool,
    "Flatten": lambda x, a: x.reshape(x.shape[0], -1),
    "Softmax": _softmax,
}


def _round_significant(a: np.ndarray, digits: int = 4) -> np.ndarray:
    exponent = np.floor(np.log10(np.maximum(np.abs(a), 1e-30)))
    return np.round(a / 10.0 ** exponent, digits - 1) * 10.0 ** exponent


def forward(net: Net, x: np.ndarray, calibrate: bool = False) -> dict[str, np.ndarray]:
    """Float64 forward pass of the net's layers; returns every value by name. With `calibrate`,
    each BatchNormalization's mean and var are first set from the statistics of its input over
    the batch x (perturbed by the layer's seeded noise), so later layers see normalised data."""
    values = {net.input_name: x.astype(np.float64)}
    for layer in net.layers:
        if calibrate and layer.op == "BatchNormalization":
            data = values[layer.inputs[0]]
            axes = (0,) + tuple(range(2, data.ndim))
            mean, var = data.mean(axis=axes), data.var(axis=axes)
            shift, stretch = net.bn_noise[layer.name]
            net.weights[layer.inputs[3]] = _round_significant(mean + shift * np.sqrt(var)).astype(np.float32)
            net.weights[layer.inputs[4]] = _round_significant(np.maximum(var * stretch, 1e-4)).astype(np.float32)
        args = [values[i] if i in values else net.weights[i].astype(np.float64) for i in layer.inputs]
        values[layer.outputs[0]] = _FORWARD[layer.op](*args, layer.attrs)
    return values


def evaluate(net: Net, x: np.ndarray) -> np.ndarray:
    """The net's output for input x, in float64."""
    return forward(net, x)[net.output_name]


def build(name: str) -> Net:
    """One architecture with its weights, BatchNormalization statistics calibrated."""
    net = ARCHITECTURES[name]()
    batch = CALIBRATION_BATCH[len(net.shapes[net.input_name])]
    forward(net, sample_input(net, seed=1000, batch=batch), calibrate=True)
    return net


# --- ONNX ------------------------------------------------------------------------------------

def to_onnx(net: Net) -> onnx.ModelProto:
    """The net as an ONNX model (checked with onnx.checker)."""
    nodes = [helper.make_node(l.op, list(l.inputs), list(l.outputs), name=l.name, **l.attrs) for l in net.layers]
    graph = helper.make_graph(
        nodes, net.name,
        [helper.make_tensor_value_info(net.input_name, TensorProto.FLOAT, net.shapes[net.input_name])],
        [helper.make_tensor_value_info(net.output_name, TensorProto.FLOAT, net.shapes[net.output_name])],
        initializer=[numpy_helper.from_array(w, name) for name, w in net.weights.items()],
        doc_string=net.doc)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION,
                              producer_name="tinsmith/models/make_models.py", doc_string=net.doc)
    onnx.checker.check_model(model, full_check=True)
    return model


def params(net: Net) -> int:
    """Parameters: elements of every initializer (BatchNormalization statistics included)."""
    return sum(w.size for w in net.weights.values())


def bn_params(net: Net) -> int:
    """Parameters of the BatchNormalization layers (what folding them into the layer before removes)."""
    return sum(net.weights[i].size for l in net.layers if l.op == "BatchNormalization" for i in l.inputs[1:])


def macs(net: Net) -> dict[str, int]:
    """Multiply-accumulates of each Conv and Gemm node."""
    result = {}
    for l in net.layers:
        if l.op == "Conv":
            w = net.weights[l.inputs[1]]
            result[l.name] = math.prod(net.shapes[l.outputs[0]]) * math.prod(w.shape[1:])
        elif l.op == "Gemm":
            result[l.name] = math.prod(net.shapes[l.outputs[0]]) * net.weights[l.inputs[1]].shape[1]
    return result


def write_models(out_dir: Path, names=tuple(ARCHITECTURES)) -> dict[str, Path]:
    """Write out_dir/NAME.onnx for each architecture; returns name -> path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name in names:
        paths[name] = out_dir / f"{name}.onnx"
        paths[name].write_bytes(to_onnx(build(name)).SerializeToString(deterministic=True))
    return paths


def _check(name: str, path: Path) -> str:
    """Run the file with ONNX Runtime on the seed-0 input and compare with `evaluate`."""
    import onnxruntime as ort

    net = build(name)
    x = sample_input(net, seed=0)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {net.input_name: x})
    want = evaluate(net, x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=name)
    flat = got.ravel()
    shown = (f"argmax {int(flat.argmax())}, max {flat.max():.6f}" if net.output_name == "probs"
             else f"mean abs {np.abs(flat).mean():.6f}")
    return (f"| `{name}` | {list(net.shapes[net.input_name])} | {params(net):,} | {bn_params(net):,} "
            f"| {sum(macs(net).values()):,} "
            f"| {path.stat().st_size / 1024:.0f} KiB | {shown}, y[:3] = {np.array2string(flat[:3], precision=6)} |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-o", "--out-dir", type=Path, default=HERE, help="where to write NAME.onnx [models/]")
    args = parser.parse_args(argv)
    print("| model | input | params | of which BatchNormalization | MACs (Conv, Gemm) | file "
          "| ONNX Runtime on the seed-0 input |")
    print("|---|---|---|---|---|---|---|")
    for name, path in write_models(args.out_dir).items():
        print(_check(name, path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
