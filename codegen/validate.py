"""`tinsmith validate`: the compiled model against the original model in its own runtime.

`check` compares the compiled code with Tinsmith's own NumPy reference; `validate` compares it
with what the user trained and exported: the .onnx file run by ONNX Runtime, the .tflite file
run by the TensorFlow Lite Micro interpreter. Both runtimes are test extras, imported only
here. The compiled model runs on the host or on the target's emulator (QEMU), on seeded random
inputs or on the user's own data.

Per layer, the original runtime exposes its intermediate tensors (ONNX Runtime: every node
output added as a graph output; TFLite Micro: the interpreter keeps every tensor), the compiled
model is built again with every value exposed (as `check --per-layer` does), and the values
both sides name alike are compared. Values the compiler folded or fused away have no compiled
counterpart and are skipped.

Metrics per output (over every sample): max and mean absolute error, RMSE, cosine similarity,
and top-1 agreement (the share of samples whose largest element is at the same place). An
output fails when its max absolute error exceeds `rtol` times the reference's largest
magnitude, or one quantization step of the original tensor where that is larger, or when its
cosine similarity is below `min_cosine`.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from tinsmith.errors import TinsmithError

RUNTIMES = {".onnx": "ONNX Runtime", ".tflite": "the TFLite Micro interpreter"}
_PACKAGES = {".onnx": ("onnxruntime", "onnxruntime"), ".tflite": ("tflite_micro", "tflite-micro")}


class ValidateError(TinsmithError):
    """The original model cannot be run, or the data does not fit the model."""


@dataclass(frozen=True)
class Metrics:
    """How far the compiled values are from the original runtime's, over every sample."""

    name: str                 # the value's name in the compiled graph
    original: str             # the tensor's name in the original model
    layer: str                # the node that computes it, "name (Op)"
    max_abs_error: float
    mean_abs_error: float
    rmse: float
    cosine: float
    top1: float | None        # share of samples with the same argmax; None for single elements
    allowed_max_abs_error: float
    min_cosine: float

    @property
    def ok(self) -> bool:
        return self.max_abs_error <= self.allowed_max_abs_error and self.cosine >= self.min_cosine

    def line(self) -> str:
        top1 = f", top-1 {self.top1:.1%}" if self.top1 is not None else ""
        return (f"max abs {self.max_abs_error:.3g} (allowed {self.allowed_max_abs_error:.3g}), "
                f"mean abs {self.mean_abs_error:.3g}, RMSE {self.rmse:.3g}, cosine {self.cosine:.6f}{top1}")


def measure(name: str, original: str, layer: str, got: Sequence[np.ndarray], want: Sequence[np.ndarray],
            step: float, rtol: float, min_cosine: float, top1: bool = True) -> Metrics:
    """Metrics of one tensor over its samples (`got[i]`, `want[i]`: sample i, in real units)."""
    g = np.concatenate([np.asarray(x, np.float64).ravel() for x in got])
    w = np.concatenate([np.asarray(x, np.float64).ravel() for x in want])
    diff = np.abs(g - w)
    norms = float(np.linalg.norm(g)) * float(np.linalg.norm(w))
    # two zero tensors agree; one zero tensor against another does not
    cosine = float(g @ w) / norms if norms else (1.0 if not g.any() and not w.any() else 0.0)
    agreement = None
    if top1 and got and np.asarray(got[0]).size > 1:
        agreement = float(np.mean([np.argmax(np.asarray(a).ravel()) == np.argmax(np.asarray(b).ravel())
                              for a, b in zip(got, want)]))
    scale = float(np.abs(w).max()) if w.size else 0.0
    return Metrics(name, original, layer, float(diff.max()) if diff.size else 0.0, float(diff.mean()) if diff.size else 0.0,
                   float(np.sqrt(np.mean(diff ** 2))) if diff.size else 0.0, cosine, agreement,
                   max(rtol * scale, step), min_cosine)


def _import_runtime(suffix: str):
    module, package = _PACKAGES[suffix]
    try:
        if suffix == ".onnx":
            import onnxruntime
            return onnxruntime
        from tflite_micro.python.tflite_micro import runtime
        return runtime
    except ImportError:
        raise ValidateError(None, f"validating a {suffix} model needs {RUNTIMES[suffix]} (the Python package "
                            f"'{package}'), which is not installed",
                            f"pip install {package}, or install Tinsmith with its test extra") from None


class OnnxReference:
    """An .onnx file run by ONNX Runtime; with `intermediates`, every node output too."""

    def __init__(self, path: Path, intermediates: bool):
        import onnx
        ort = _import_runtime(".onnx")
        model = onnx.load(str(path))
        self.outputs = [o.name for o in model.graph.output]
        if intermediates:
            known = set(self.outputs) | {i.name for i in model.graph.input}
            for node in model.graph.node:
                for name in node.output:
                    if name and name not in known:
                        model.graph.output.append(onnx.ValueInfoProto(name=name))
                        known.add(name)
        self.session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])

    def step(self, name: str) -> float:
        return 0.0  # values are compared as they are (float, or the integers of a QDQ model)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        names = [o.name for o in self.session.get_outputs()]
        return dict(zip(names, self.session.run(None, dict(feeds))))

    def real(self, name: str, values: np.ndarray) -> np.ndarray:
        return np.asarray(values, np.float64)


NO_DATA_TYPES = (13, 14)  # TFLite's resource and variant tensors (a resource variable's handle)


class TfliteReference:
    """A .tflite file run by the TFLite Micro interpreter; with `intermediates`, every tensor
    (the interpreter preserves them all). Quantized tensors are compared in real units."""

    def __init__(self, path: Path, intermediates: bool):
        tflm = _import_runtime(".tflite")
        from tinsmith.load.tflite_model import _tflite
        tfl = _tflite()
        model = tfl.Model.GetRootAsModel(path.read_bytes(), 0)
        graph = model.Subgraphs(0)
        self.names = [(graph.Tensors(i).Name() or f"tensor{i}".encode()).decode("utf-8", "replace")
                      for i in range(graph.TensorsLength())]  # (unnamed tensors as the importer names them)
        self.quant: dict[str, tuple[float, int]] = {}
        constant = set()
        for i in range(graph.TensorsLength()):
            t = graph.Tensors(i)
            q = t.Quantization()
            if q is not None and q.ScaleLength() == 1:
                zp = q.ZeroPointAsNumpy()
                self.quant[self.names[i]] = (float(q.ScaleAsNumpy()[0]), int(zp[0]) if isinstance(zp, np.ndarray) else 0)
            buf = model.Buffers(t.Buffer())
            if (buf is not None and (buf.DataLength() or buf.Offset() > 1)) or t.Type() in NO_DATA_TYPES:
                constant.add(i)  # (and handles that hold no data: the interpreter cannot show them)
        self.inputs = [self.names[int(i)] for i in graph.InputsAsNumpy()]
        self.outputs = [self.names[int(i)] for i in graph.OutputsAsNumpy()]
        self.computed = [i for i in range(len(self.names)) if i not in constant
                         and self.names[i] not in self.inputs and self.names.count(self.names[i]) == 1]
        config = tflm.InterpreterConfig.kPreserveAllTensors if intermediates else tflm.InterpreterConfig.kAllocationRecording
        # a new interpreter per sample: each starts from the model's starting state (its variables,
        # CALL_ONCE's init subgraph), as each compiled run does; reset() would zero them instead
        self.interpreter = lambda: tflm.Interpreter.from_file(str(path), intrepreter_config=config)
        self.interpreter()  # (a model it cannot run fails here, before any sample)
        self.intermediates = intermediates

    def step(self, name: str) -> float:
        return self.quant.get(name, (0.0, 0))[0]

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        interpreter = self.interpreter()
        for k, name in enumerate(self.inputs):
            interpreter.set_input(np.asarray(feeds[name]), k)
        interpreter.invoke()
        result = {name: np.array(interpreter.get_output(k)) for k, name in enumerate(self.outputs)}
        if self.intermediates:
            for i in self.computed:
                result.setdefault(self.names[i], np.array(interpreter.GetTensor(i, 0)["tensor_data"]))
        return result

    def real(self, name: str, values: np.ndarray) -> np.ndarray:
        scale, zero = self.quant.get(name, (1.0, 0))
        values = np.asarray(values, np.float64)
        return (values - zero) * scale if name in self.quant else values


def reference_runtime(path: Path, intermediates: bool):
    """The original runtime for a model file, chosen by its suffix."""
    if path.suffix == ".onnx":
        return OnnxReference(path, intermediates)
    if path.suffix == ".tflite":
        return TfliteReference(path, intermediates)
    raise ValidateError(None, f"{path} is not an .onnx or .tflite model",
                        "validate compares with the original model's own runtime: give the .onnx or .tflite "
                        "file (with --reference when the compiled model is a graph YAML)")


def read_samples(graph, path: Path, aliases: Mapping[str, str]) -> list[dict[str, np.ndarray]]:
    """The user's data: a folder of .npz (one sample each, arrays named after the inputs) or, for
    a one-input model, .npy files (one sample each); or one .npz whose arrays have one more
    (leading) dimension than the inputs: a batch, one sample per row."""
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".npy", ".npz"))
        if not files:
            raise ValidateError(None, f"{path} holds no .npy or .npz files")
        return [_sample(graph, f, aliases) for f in files]
    if path.suffix != ".npz":
        raise ValidateError(None, f"cannot read samples from {path}",
                            "give a folder of .npy/.npz files or one .npz (a batch, or one sample)")
    arrays = _arrays(path, aliases)
    first = graph.types[graph.api_inputs[0]]
    batched = graph.api_inputs[0] in arrays and arrays[graph.api_inputs[0]].ndim == len(first.shape) + 1
    if not batched:
        return [_sample(graph, path, aliases)]
    count = arrays[graph.api_inputs[0]].shape[0]
    return [_shaped(graph, {n: a[k] for n, a in arrays.items()}, f"{path} row {k}") for k in range(count)]


def _arrays(path: Path, aliases: Mapping[str, str]) -> dict[str, np.ndarray]:
    try:
        if path.suffix == ".npy":
            return {"": np.load(path, allow_pickle=False)}
        with np.load(path, allow_pickle=False) as archive:
            return {aliases.get(k, k): archive[k] for k in archive.files}
    except (OSError, ValueError) as e:
        raise ValidateError(None, f"cannot read samples from {path}: {e}") from None


def _sample(graph, path: Path, aliases: Mapping[str, str]) -> dict[str, np.ndarray]:
    arrays = _arrays(path, aliases)
    if "" in arrays:
        if len(graph.api_inputs) != 1:
            raise ValidateError(None, f"{path}: an .npy file holds one array, the model has "
                                f"{len(graph.api_inputs)} inputs", "give one .npz per sample")
        arrays = {graph.api_inputs[0]: arrays[""]}
    return _shaped(graph, arrays, str(path))


def _shaped(graph, arrays: Mapping[str, np.ndarray], where: str) -> dict[str, np.ndarray]:
    missing = [n for n in graph.api_inputs if n not in arrays]
    if missing:
        raise ValidateError(None, f"{where} lacks input{'s' * (len(missing) > 1)} {', '.join(missing)}")
    sample = {}
    for name in graph.api_inputs:
        t, a = graph.types[name], arrays[name]
        if tuple(a.shape) != t.shape:
            raise ValidateError(None, f"input '{name}' in {where} has shape {list(a.shape)}, the model "
                                f"expects {list(t.shape)}")
        sample[name] = np.ascontiguousarray(a, dtype=t.numpy_dtype)
    return sample


@dataclass(frozen=True)
class Validation:
    """The outcome: metrics of every output and, with per-layer, of every value both sides name."""

    runtime: str
    target: str
    samples: int
    source: str               # "N seeded random inputs" or the data path
    outputs: tuple[Metrics, ...]
    layers: tuple[Metrics, ...]

    @property
    def ok(self) -> bool:
        return all(m.ok for m in self.outputs + self.layers)

    def as_json(self) -> dict:
        def entry(m: Metrics) -> dict:
            return {**asdict(m), "ok": m.ok}
        return {"runtime": self.runtime, "target": self.target, "samples": self.samples, "data": self.source,
                "ok": self.ok, "outputs": [entry(m) for m in self.outputs],
                "layers": [entry(m) for m in self.layers]}


RunCompiled = Callable[[Path, Mapping[str, np.ndarray], Path], Mapping[str, np.ndarray]]


def validate(model: Path, reference: Path, graph, samples: Sequence[Mapping[str, np.ndarray]], target: str,
             run: RunCompiled, build_dir: Path, per_layer: bool, rtol: float, min_cosine: float,
             names: Mapping[str, str], source: str) -> Validation:
    """Run `samples` through the original runtime of `reference` and through the compiled
    `model` (`run(graph file, inputs, build folder)`); `names` maps the graph's identifiers to the
    original tensor names they came from."""
    runtime = reference_runtime(reference, per_layer)
    original = {ident: names.get(ident, ident) for ident in graph.api_inputs}
    want, got = [], []
    if per_layer:
        from tinsmith.per_layer import probe_graph_file, with_starting_states
        compiled_path = probe_graph_file(graph, build_dir / "validate" / f"{graph.name}.yaml")
    else:
        compiled_path = model
    for sample in samples:
        want.append(runtime.run({original[k]: v for k, v in sample.items()}))
        got.append(run(compiled_path, with_starting_states(graph, sample), build_dir / "validate") if per_layer
                   else run(compiled_path, sample, build_dir))

    producer = {v: f"{node.name} ({node.op})" for node in graph.nodes for v in node.outputs if v}

    def compare(idents: Sequence[str], top1: bool) -> tuple[Metrics, ...]:
        result = []
        for ident in idents:
            name = names.get(ident, ident)
            if name not in want[0] or ident not in got[0]:
                continue
            result.append(measure(ident, name, producer.get(ident, ""),
                                  [runtime.real(name, g[ident]) for g in got], [runtime.real(name, w[name]) for w in want],
                                  runtime.step(name), rtol, min_cosine, top1))
        return tuple(result)

    outputs = compare(graph.api_outputs, True)
    if len(outputs) != len(graph.api_outputs):
        raise ValidateError(None, f"the outputs of {model} ({', '.join(graph.api_outputs)}) are not all outputs of "
                            f"{reference}", "give the original model the compiled one was made from")
    layers = compare([v for node in graph.nodes for v in node.outputs if v and v not in graph.outputs], False) \
        if per_layer else ()
    return Validation(RUNTIMES[reference.suffix], target, len(samples), source, outputs, layers)


def print_validation(v: Validation, graph_name: str, out) -> None:
    """The outputs' metrics, then each layer's (ok/FAIL), then one verdict line."""
    print(f"{graph_name} [{v.target}] against {v.runtime} on {v.source}:", file=out)
    for m in v.outputs:
        print(f"  {'ok  ' if m.ok else 'FAIL'} output {m.name}: {m.line()}", file=out)
    if v.layers:
        print(f"per layer ({len(v.layers)} values both compute, in graph order):", file=out)
        width = max(len(m.layer) for m in v.layers)
        for m in v.layers:
            print(f"  {'ok  ' if m.ok else 'FAIL'} {m.layer:<{width}} {m.line()}", file=out)
