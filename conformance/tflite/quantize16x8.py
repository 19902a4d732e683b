"""The real float32 models quantized to 16x8 (int16 activations, int8 weights, int64 bias) by Google's
own quantizer, ai-edge-quantizer, with its static int16-activation / int8-weight recipe, calibrated on
a few seeded random inputs: no PyPI package ships a 16x8 model, so conformance/tflite/real_models.py
derives them from the float ones and checks them like the others.

ai-edge-quantizer is an optional extra of its own (`pip install -c constraints.txt -e ".[real-models]"`),
never a dependency of Tinsmith or of its tests. The quantized files go into the cache, each a
function of the float file, the quantizer's version, the recipe and the calibration seeds (all named
in its folder), so a run finds the same bytes a former run wrote.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Sequence

import numpy as np

QUANTIZER, QUANTIZER_VERSION = "ai-edge-quantizer", "0.10.0"
RECIPE = "static_wi8_ai16"  # int8 weights (per channel, symmetric), int16 activations (symmetric)
CALIBRATION_SEEDS = (1000, 1001, 1002)  # standard normal data sets, apart from the checks' seeds 0, 1, ...
SIGNATURE_KEY = "serving_default"
INSTALL = 'pip install -c constraints.txt -e ".[real-models]"'


class QuantizerMissing(RuntimeError):
    """ai-edge-quantizer is not installed (or not the pinned version)."""


def require_quantizer() -> None:
    """Raise QuantizerMissing, with the command that installs it, unless the pinned quantizer is there."""
    from importlib import metadata
    try:
        version = metadata.version(QUANTIZER)
    except metadata.PackageNotFoundError:
        raise QuantizerMissing(f"the 16x8 rows need Google's {QUANTIZER}=={QUANTIZER_VERSION}, which is not "
                               f"installed: {INSTALL} (or pass --no-16x8 to check the shipped models only)") from None
    if version != QUANTIZER_VERSION:
        raise QuantizerMissing(f"the 16x8 rows are made with {QUANTIZER}=={QUANTIZER_VERSION}; this environment "
                               f"has {version}: {INSTALL}")


def is_float_model(types: str) -> bool:
    """Whether a model (its element types as real_models.describe lists them) computes in float32:
    float32 values and no quantized ones (float16 weights that a DEQUANTIZE widens count as float)."""
    kinds = set(types.split("/"))
    return "float32" in kinds and not kinds & {"int8", "uint8", "int16"}


def folder(cache: Path) -> Path:
    """Where the quantized files go: named by everything they are derived from."""
    seeds = "-".join(str(s) for s in CALIBRATION_SEEDS)
    return cache / "16x8" / f"{QUANTIZER}-{QUANTIZER_VERSION}-{RECIPE}-calibrated-{seeds}"


DEQUANTIZE, FLOAT16, FLOAT32 = 6, 1, 0  # TFLite's BuiltinOperator and TensorType numbers


def for_the_quantizer(data: bytes) -> bytes:
    """The float model as ai-edge-quantizer 0.10 can read it. Its passes read an operator's code from
    builtin_code alone, which files written before schema 3a leave 0 (ADD), keeping the code in
    deprecated_builtin_code: every code is written in both, as TFLite's readers resolve it. It fails
    on float16 weights widened by a DEQUANTIZE (a None where it expects their values): each such
    DEQUANTIZE is done here, its output a float32 constant of the same values (what the converter
    writes without its float16 option). And it calibrates through a signature: a model without one
    gets `serving_default` over the main subgraph's inputs and outputs, named as their tensors."""
    from ai_edge_litert import schema_py_generated as schema
    from ai_edge_litert.tools import flatbuffer_utils
    model = flatbuffer_utils.read_model_from_bytearray(bytearray(data))
    for code in model.operatorCodes:
        code.builtinCode = max(code.builtinCode, code.deprecatedBuiltinCode)
    _widen_float16_weights(model, schema)
    if not model.signatureDefs:
        graph = model.subgraphs[0]

        def entry(index: int):
            item = schema.TensorMapT()
            name = graph.tensors[index].name
            item.name, item.tensorIndex = name.decode() if isinstance(name, bytes) else name, int(index)
            return item
        signature = schema.SignatureDefT()
        signature.signatureKey, signature.subgraphIndex = SIGNATURE_KEY, 0
        signature.inputs = [entry(i) for i in graph.inputs]
        signature.outputs = [entry(i) for i in graph.outputs]
        model.signatureDefs = [signature]
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))


def _widen_float16_weights(model, schema) -> None:
    """Every DEQUANTIZE of a stored float16 tensor replaced by a float32 constant of its values."""
    for graph in model.subgraphs:
        kept = []
        for op in graph.operators:
            source = graph.tensors[op.inputs[0]] if op.inputs else None
            data = model.buffers[source.buffer].data if source is not None else None
            if model.operatorCodes[op.opcodeIndex].builtinCode != DEQUANTIZE or source.type != FLOAT16 or data is None \
                    or not len(data):
                kept.append(op)
                continue
            buffer = schema.BufferT()
            buffer.data = np.frombuffer(bytes(data), "<f2").astype("<f4").view(np.uint8)
            model.buffers.append(buffer)
            target = graph.tensors[op.outputs[0]]
            target.buffer, target.type = len(model.buffers) - 1, FLOAT32
        graph.operators = kept


def calibration_data(data: bytes) -> dict[str, list[dict[str, np.ndarray]]]:
    """One data set per calibration seed for the model's first signature: float inputs standard
    normal (as the checks draw them), integer ones over 0..9, booleans either way."""
    from ai_edge_litert.interpreter import Interpreter
    interpreter = Interpreter(model_content=data)
    key = next(iter(interpreter.get_signature_list()))
    details = interpreter.get_signature_runner(key).get_input_details()
    sets = []
    for seed in CALIBRATION_SEEDS:
        rng = np.random.default_rng(seed)
        one = {}
        for name, d in sorted(details.items()):
            dtype, shape = np.dtype(d["dtype"]), tuple(int(n) for n in d["shape"])
            one[name] = rng.standard_normal(shape).astype(dtype) if dtype.kind == "f" else \
                rng.integers(0, 2, shape).astype(dtype) if dtype == np.bool_ else rng.integers(0, 10, shape).astype(dtype)
        sets.append(one)
    return {key: sets}


def quantize(data: bytes) -> bytes:
    """The float model quantized to 16x8 by ai-edge-quantizer's static_wi8_ai16 recipe, calibrated on
    CALIBRATION_SEEDS' data sets. The operators the recipe leaves in float stay float, a DEQUANTIZE
    before and a QUANTIZE after each: the file is the quantizer's, as a user would get it."""
    import contextlib
    import io

    from ai_edge_quantizer import quantizer, recipe
    readable = for_the_quantizer(data)
    q = quantizer.Quantizer(bytearray(readable), getattr(recipe, RECIPE)())
    with contextlib.redirect_stderr(io.StringIO()):  # (its progress bars)
        calibration = q.calibrate(calibration_data(readable), num_threads=1)
        result = q.quantize(calibration, enable_progress_bar=False, enable_progress_report=False)
    return bytes(result.quantized_model)


def quantized_model(model, cache: Path):
    """real_models.Model of the float model's 16x8 version, written into the cache if not there yet."""
    out = folder(cache) / f"{model.wheel.name}-{model.wheel.version}" / model.member
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_suffix(".partial")
        partial.write_bytes(quantize(model.path.read_bytes()))
        partial.replace(out)  # (a run stopped halfway leaves no half-written model behind)
    return replace(model, path=out, same_as=[], note=f"16x8: {QUANTIZER} {QUANTIZER_VERSION} {RECIPE}")


def quantizer_failure(e: BaseException) -> str:
    """The quantizer's own message, first line, for the table."""
    text = str(e).strip()
    return f"{QUANTIZER} {QUANTIZER_VERSION} did not quantize it: {type(e).__name__}: " \
           f"{text.splitlines()[0] if text else ''}"

