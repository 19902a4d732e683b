"""Write a GraphSpec as a graph file (YAML version 1) plus its weights (.npz), and import ONNX
models that way: `python -m tinsmith import-onnx MODEL.onnx -o graphs/NAME.yaml`.

The file is written by hand rather than by a YAML library so it reads like one written by a
person: one block per node, short lists inline, and comments with the names the model used.
Small integer vectors (shape operands) are written inline; every other constant goes to
NAME.npz beside the graph file, which is written byte for byte the same for the same data.
"""
from __future__ import annotations

import io
import math
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from tinsmith.escape import yaml_comment, yaml_scalar
from tinsmith.files import write_if_changed
from tinsmith.errors import TinsmithError
from tinsmith.ir import Constant
from tinsmith.load.graph_file import GraphSpec, NodeSpec
from tinsmith.load.onnx_model import OnnxModel, printable, read_onnx, sanitize
from tinsmith.ops.shape_ops import TensorValue

INLINE_INT_ELEMENTS = 16  # int64 vectors up to this size are written in the graph file
INLINE_FLOAT_ELEMENTS = 4  # so are float32 vectors this small (scalars, clip bounds)


@dataclass(frozen=True)
class Notes:
    """Comments for a written graph file: header lines, and notes per value and per node."""

    header: tuple[str, ...] = ()
    values: Mapping[str, str] = field(default_factory=dict)
    nodes: Sequence[str] = ()  # by node index; "" for none


_name = yaml_scalar  # every string the graph file holds goes through it


def _number(v: Any) -> str:
    if isinstance(v, (bool, np.bool_)):
        return "1" if v else "0"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    v = float(v)
    if math.isnan(v):
        return ".nan"
    if math.isinf(v):
        return ".inf" if v > 0 else "-.inf"
    return repr(v)


def _float32(v: Any) -> str:
    """A float32 value in its shortest spelling that reads back as the same float32."""
    v = np.float32(v)
    return _number(float(str(v))) if np.isfinite(v) else _number(float(v))


def _flow(v: Any) -> str:
    """An attribute value in YAML flow style."""
    if isinstance(v, np.ndarray):
        v = TensorValue.of(v)
    if isinstance(v, TensorValue):
        number = _float32 if v.dtype == "float32" else _number
        return (f"{{dtype: {v.dtype}, shape: {_flow(list(v.shape))}, "
                f"value: [{', '.join(number(x) for x in v.data)}]}}")
    if isinstance(v, str):
        return _name(v) if v else '""'
    if isinstance(v, (list, tuple)):
        return f"[{', '.join(_flow(x) for x in v)}]"
    if isinstance(v, Mapping):
        return f"{{{', '.join(f'{_name(str(k))}: {_flow(x)}' for k, x in v.items())}}}"
    if isinstance(v, (int, float, np.number, bool)):
        return _number(v)
    raise TinsmithError(None, f"cannot write attribute value {v!r} in a graph file")


def _comment(text: str) -> str:
    return f"  # {yaml_comment(text)}" if text else ""


def _inline(c: Constant) -> bool:
    data = c.data
    if data.size == 0 or data.ndim > 1:
        return False
    limit = INLINE_INT_ELEMENTS if data.dtype.kind in "iu" else INLINE_FLOAT_ELEMENTS
    return data.size <= limit and (data.dtype.kind != "f" or bool(np.all(np.isfinite(data))))


def _quant_entry(q) -> str:
    """`, quant: {...}` for quantized data (scales as the float32 values they are), else ""."""
    if q is None:
        return ""
    scale = [_float32(v) for v in q.scale]
    zero = [_number(v) for v in q.zero_point]
    text = (f"scale: {scale[0] if len(scale) == 1 else '[' + ', '.join(scale) + ']'}, "
            f"zero_point: {zero[0] if len(zero) == 1 else '[' + ', '.join(zero) + ']'}")
    return f", quant: {{{text}{'' if q.axis is None else f', axis: {q.axis}'}}}"


def _constant_entry(c: Constant, weights_file: str) -> str:
    if _inline(c):
        number = _float32 if c.data.dtype == np.float32 else _number
        items = [number(x) for x in c.data.reshape(-1)]
        value = items[0] if c.data.ndim == 0 else f"[{', '.join(items)}]"
        return f"{{value: {value}, dtype: {c.data.dtype.name}{_quant_entry(c.quant)}}}"
    # the loader reads stored integers as int64 unless told: quantized data names its type
    dtype = "" if c.data.dtype.name in ("float32", "int64") else f", dtype: {c.data.dtype.name}"
    return f"{{file: {_name(weights_file)}, key: {_name(c.name)}{dtype}{_quant_entry(c.quant)}}}"


def _check_writable(constants: Sequence[Constant]) -> None:
    """Graph files hold non-empty, finite data only; say which constants are not."""
    unwritable = [c for c in constants if c.data.size == 0
                  or (c.data.dtype.kind == "f" and not np.all(np.isfinite(c.data)))]
    bad = [f"'{c.name}' ({'empty' if c.data.size == 0 else 'holds NaN or infinite values'})"
           for c in unwritable]
    if bad:  # located at the first one (in a model: the initializer or Constant node)
        raise TinsmithError(unwritable[0].loc, f"constants a graph file cannot hold: {', '.join(bad)}",
                            "compile the model file directly instead of importing it")


def _node_block(node: NodeSpec, note: str) -> list[str]:
    lines = [f"  - op: {_name(node.op)}"]
    if node.name is not None:
        lines.append(f"    name: {_name(node.name)}{_comment(note)}")
    elif note:
        lines[0] += _comment(note)
    inputs = ", ".join(_name(n) if n else '""' for n in node.inputs)
    lines.append(f"    inputs: [{inputs}]")
    lines.append(f"    outputs: [{', '.join(_name(n) for n in node.outputs)}]")
    if node.attrs:
        lines.append(f"    attrs: {_flow(dict(sorted(node.attrs.items())))}")
    return lines


def graph_yaml(spec: GraphSpec, name: str, weights_file: str,
               notes: Notes = Notes()) -> tuple[str, dict[str, np.ndarray]]:
    """The text of a graph file for `spec` (named `name`) and the arrays of its weights file."""
    _check_writable(spec.constants)
    lines = [f"# {yaml_comment(line)}" if line else "#" for line in notes.header]
    lines += [f"graph: {_name(name)}", "version: 1", "inputs:"]
    for v in spec.inputs:
        lines.append(f"  {_name(v.name)}: {{dtype: {v.type.dtype}, shape: {_flow(list(v.type.shape))}"
                     f"{_quant_entry(v.type.quant)}}}"
                     + _comment(notes.values.get(v.name, "")))
    if any(v.name in notes.values for v in spec.outputs):
        lines.append("outputs:")
        lines += [f"  - {_name(v.name)}{_comment(notes.values.get(v.name, ''))}" for v in spec.outputs]
    else:
        lines.append(f"outputs: [{', '.join(_name(v.name) for v in spec.outputs)}]")
    if spec.states:  # values kept between calls: the input, the output holding its next value
        lines.append("states:")
        lines += [f"  {_name(s.read)}: {{next: {_name(s.write)}, fill: {_number(s.fill)}}}" for s in spec.states]
    weights: dict[str, np.ndarray] = {}
    if spec.constants:
        lines.append("constants:")
        for c in spec.constants:
            if not _inline(c):
                weights[c.name] = c.data
            what = ", ".join(filter(None, [str(c.type), notes.values.get(c.name, "")]))
            lines.append(f"  {_name(c.name)}: {_constant_entry(c, weights_file)}{_comment(what)}")
    lines.append("nodes:")
    for i, node in enumerate(spec.nodes):
        lines += _node_block(node, notes.nodes[i] if i < len(notes.nodes) else "")
    return "\n".join(lines) + "\n", weights


def npz_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    """An .npz archive of `arrays` (as numpy.savez writes it) with fixed timestamps, so the same
    data gives the same bytes and builds that depend on it do not rerun."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for key in sorted(arrays):
            entry = io.BytesIO()
            np.lib.format.write_array(entry, np.ascontiguousarray(arrays[key]), allow_pickle=False)
            info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            archive.writestr(info, entry.getvalue())
    return buffer.getvalue()


def write_graph(spec: GraphSpec, yaml_path: str | Path, notes: Notes = Notes()) -> list[Path]:
    """Write `spec` as YAML_PATH and its weights as the .npz beside it (if any); return the files.
    The graph is named after the file."""
    yaml_path = Path(yaml_path)
    weights_path = yaml_path.with_suffix(".npz")
    text, weights = graph_yaml(spec, sanitize(yaml_path.stem, "g", "graph"), weights_path.name, notes)
    written = [write_if_changed(yaml_path, text.encode("utf-8"))]
    if weights:
        written.append(write_if_changed(weights_path, npz_bytes(weights)))
    return written


def onnx_notes(model: OnnxModel, source: str) -> Notes:
    """Comments naming what each value and node was called in the ONNX model."""
    upgraded = f", upgraded to opset {model.opset}" if model.upgraded_from else ""
    opset = model.upgraded_from or model.opset
    header = [f"Imported from {source} (opset {opset}{upgraded}"
              + (f"; produced by {model.producer}" if model.producer else "") + ")",
              "by `python -m tinsmith import-onnx`. Weights are in the .npz file beside this one.",
              "Names that are not C identifiers were renamed; comments give the ONNX names."]
    values = {new: f"ONNX '{printable(old)}'" for new, old in model.values.items()}
    for name, origin in model.constant_origins.items():
        values[name] = f"ONNX {origin}" if origin.startswith("Constant") else values.get(name, "")
    for name in model.batch_inputs:
        values[name] = ", ".join(filter(None, [values.get(name, ""), "batch dimension set to 1"]))
    nodes = []
    for old, node in zip(model.nodes, model.spec.nodes):
        renamed = ", ".join(f"'{printable(model.values[o])}'" for o in node.outputs if o in model.values)
        named = f"ONNX '{printable(old)}'" if old and old != node.name else "ONNX" if renamed else ""
        nodes.append(f"{named} -> {renamed}" if renamed else named)
    return Notes(tuple(header), values, tuple(nodes))


def import_onnx(model_path: str | Path, yaml_path: str | Path, batch: int = 1) -> list[Path]:
    """Import an ONNX model as a graph file (YAML_PATH) and weights (NAME.npz beside it); the
    model is checked first (every op supported, every shape known). Returns the files written."""
    from tinsmith.expand import expand_graph
    model = read_onnx(model_path, batch)
    expand_graph(model.spec)  # errors are reported against the model, before anything is written
    written = write_graph(model.spec, yaml_path, onnx_notes(model, Path(model_path).name))
    _reload(Path(yaml_path), written)
    return written


def import_tflite(model_path: str | Path, yaml_path: str | Path) -> list[Path]:
    """Import a .tflite model as a graph file plus NAME.npz beside it; return the files written."""
    from tinsmith.load.tflite_model import read_tflite
    model = read_tflite(model_path)
    values = {new: f"TFLite '{printable(old)}'" for new, old in model.values.items()}
    notes = Notes((f"Imported from {Path(model_path).name} (TensorFlow Lite, NHWC).",), values)
    written = write_graph(model.spec, yaml_path, notes)
    _reload(Path(yaml_path), written)
    return written


def import_model(model_path: str | Path, yaml_path: str | Path, batch: int = 1) -> list[Path]:
    """Import an ONNX or TFLite model, chosen by the file's suffix."""
    from tinsmith.load import is_tflite
    if is_tflite(model_path):
        return import_tflite(model_path, yaml_path)
    return import_onnx(model_path, yaml_path, batch)


def _reload(yaml_path: Path, written: list[Path]) -> None:
    """Load what was written as any graph file is loaded: an import that writes a graph file which
    does not load is a bug, never a success; what was written is removed and the reason reported."""
    from tinsmith.expand import expand_graph
    from tinsmith.load.graph_file import load_graph_spec
    try:
        expand_graph(load_graph_spec(yaml_path))
    except TinsmithError as e:
        for path in written:
            path.unlink(missing_ok=True)
        raise TinsmithError(e.loc, f"the imported graph file does not load, so it was removed: {e.message}",
                            e.hint) from None
