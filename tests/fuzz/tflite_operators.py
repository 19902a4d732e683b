"""Hostile TFLite operators, written field by field: what byte damage to a flatbuffer rarely reaches.

Damage at random offsets (quick.mutate_flatbuffer) mostly breaks the file's structure, which the
reader refuses early. These models are well-formed flatbuffers whose operators lie: a builtin code
the schema does not know (negative, past the last operator, a deprecated code that disagrees with
the new one), a custom code (an NPU's, TFLite Micro's signal library's, not UTF-8), builtin
options of another operator's table or with hostile values (zero, negative and huge strides,
padding and activation codes past their enums, NaN and infinite floats, vectors with hostile
entries), custom options bytes, and operands of every element type, rank, quantization (zero,
negative, NaN scales, zero points out of range, per-channel on a missing axis) and constant data
that does or does not fit its shape. Each is made from a seeded random source, as every case.
"""
from __future__ import annotations

import functools
import importlib
import inspect
import random
import sys

import numpy as np

from . import harness

# element types the writer knows (tests/tflite_writer.py)
DTYPES = ("float32", "int8", "int8", "int32", "uint8", "int16", "bool", "int64", "float16")
SANE_SCALES = (0.05, 0.1, 1 / 256, 0.02, 0.5)
HOSTILE_INTS = (0, 1, 2, 3, -1, -2, 7, 64, 127, 255, 4097, 2**31 - 1, -2**31)
HOSTILE_FLOATS = (0.0, 1.0, -1.0, 0.5, 1e-30, 1e30, float("nan"), float("inf"), -float("inf"))
DIMS = (1, 1, 2, 3, 4, 5, 8, 0, -1)
# custom codes: NPU subgraphs, TFLite Micro's signal library, arbitrary text, bytes that are not UTF-8
CUSTOM_CODES = ("ethos-u", "edgetpu-custom-op", "SignalWindow", "SignalFftAutoScale", "TFLite_Detection_PostProcess",
                "", "x" * 300, b"\xff\xfe\x00bad", "a\nb", "\u202e")
# flatbuffer slot writers, by the scalar type they store, and that type's range
_SCALAR_RANGES = {"Bool": (0, 1), "Int8": (-128, 127), "Uint8": (0, 255), "Int16": (-2**15, 2**15 - 1),
                  "Uint16": (0, 2**16 - 1), "Int32": (-2**31, 2**31 - 1), "Uint32": (0, 2**32 - 1),
                  "Int64": (-2**63, 2**63 - 1), "Uint64": (0, 2**64 - 1)}


def _writer():
    if str(harness.ROOT / "tests") not in sys.path:
        sys.path.insert(0, str(harness.ROOT / "tests"))  # (tests/tflite_writer.py)
    import tflite_writer
    return tflite_writer


@functools.lru_cache(maxsize=None)
def option_fields(table: str) -> tuple[tuple[str, str], ...]:
    """The fields of builtin options table `table`: (name, 'vector', 'Float32' or an integer type)."""
    module = importlib.import_module(f"tflite.{table}")
    fields = []
    for name in sorted(dir(module)):
        if not name.startswith(f"{table}Add"):
            continue
        source = inspect.getsource(getattr(module, name))
        kind = next((k for k in ("UOffsetTRelative", "Float32", "Float64", *_SCALAR_RANGES) if f"Prepend{k}Slot" in source),
                    None)
        if kind is not None:
            fields.append((name[len(table) + 3:], "vector" if kind == "UOffsetTRelative" else kind))
    return tuple(fields)


@functools.lru_cache(maxsize=None)
def option_tables() -> tuple[str, ...]:
    import tflite
    return tuple(sorted(n for n in dir(tflite.BuiltinOptions) if n.endswith("Options")))


@functools.lru_cache(maxsize=None)
def builtin_codes() -> dict[str, int]:
    import tflite
    from tinsmith.load.tflite_operators import OPERATORS
    return {name: getattr(tflite.BuiltinOperator, name) for name in sorted(OPERATORS)
            if hasattr(tflite.BuiltinOperator, name)}


def _options_for(name: str) -> str | None:
    """The options table TFLite's schema pairs with builtin operator `name` (CONV_2D: Conv2DOptions), if one
    is named after it."""
    wanted = name.replace("_", "").lower() + "options"
    return next((t for t in option_tables() if t.lower() == wanted or t.lower() == wanted.replace("2d", "")), None)


def _value(rng: random.Random, kind: str):
    if kind == "vector":
        return [rng.choice(HOSTILE_INTS[:9]) for _ in range(rng.choice([0, 1, 2, 3, 4, 9]))]
    if kind in ("Float32", "Float64"):
        return rng.choice(HOSTILE_FLOATS)
    low, high = _SCALAR_RANGES[kind]
    value = rng.choice(HOSTILE_INTS) if rng.random() < 0.7 else rng.randint(-3, 12)
    return min(max(value, low), high)


def _options(rng: random.Random, name: str | None) -> tuple[str, dict] | None:
    """The operator's own options table (most of the time) or another one, with some fields set to
    plausible or hostile values; None: options left out."""
    own = _options_for(name) if name else None
    if rng.random() < 0.08 or (own is None and rng.random() < 0.7):
        return None
    table = own if own is not None and rng.random() < 0.85 else rng.choice(option_tables())
    fields = {}
    for field, kind in option_fields(table):
        if rng.random() < 0.6:
            fields[field] = _value(rng, kind) if rng.random() < 0.4 else (
                [1, 1] if kind == "vector" else (1.0 if kind.startswith("Float") else rng.choice([0, 1, 2 % (kind != "Bool" and 3 or 2)])))
    return table, fields


def _quant(rng: random.Random, shape: list[int]):
    if rng.random() < 0.6:
        return (rng.choice(SANE_SCALES), rng.choice([0, -128, 5])), 0
    if rng.random() < 0.7:
        scale = rng.choice([0.05, 0.0, -1.0, float("nan"), float("inf"), 1e-30, 1e30])
        zero = rng.choice([0, -128, 127, -1, 300, -300])
        return (scale, zero), 0
    channels = rng.choice([1, 2, 3, max(1, shape[0]) if shape else 1])
    scales = [rng.choice([0.05, 0.1, 0.0, -1.0]) for _ in range(channels)]
    return (scales, [0] * channels), rng.choice([0, 0, 1, 3, 7, -1])


def _tensor(rng: random.Random, writer, name: str, constant: bool, dtype: str | None = None):
    dtype = dtype or rng.choice(DTYPES)
    dims = DIMS if rng.random() < 0.3 else DIMS[:7]
    shape = [rng.choice(dims) for _ in range(rng.choice([0, 1, 2, 2, 3, 4, 4, 5]))]
    quant, axis = _quant(rng, shape) if dtype in ("int8", "uint8", "int16", "int32") and rng.random() < 0.8 else (None, 0)
    data = None
    if constant:
        size = int(np.prod([max(d, 0) for d in shape])) if rng.random() < 0.8 else rng.choice([0, 1, 3, 17])
        size = min(size, 4096)
        data = np.random.default_rng(rng.randrange(1 << 30)).integers(-3, 4, size).astype(
            "float32" if dtype == "float16" else dtype)
    return writer.Tensor(name if rng.random() < 0.95 else None, dtype, shape, data=data, quant=quant, axis=axis)


def hostile_operator_model(rng: random.Random) -> bytes:
    """A well-formed flatbuffer of one to three operators whose codes, options and operands are
    drawn to reach the importer's checks (see the module's docstring)."""
    writer = _writer()
    codes = builtin_codes()
    from tinsmith.load.tflite_operators import OPERATORS
    tensors, ops = [], []
    first_name = rng.choice(sorted(codes))
    # the element types its registration names (ANY, of an operator no element type decides, is none)
    named = [t for t in OPERATORS[first_name].types if t in DTYPES]
    dtype = rng.choice(named) if named and rng.random() < 0.8 else rng.choice(DTYPES)
    tensors.append(_tensor(rng, writer, "x", False, dtype))
    for k in range(rng.choice([1, 1, 1, 2, 3])):
        draw = rng.random()
        custom, need = None, 1
        if draw < 0.85:
            name = first_name if k == 0 else rng.choice(sorted(codes))
            code, need = codes[name], OPERATORS[name].min_inputs
        elif draw < 0.93:
            name, code = None, rng.choice([-128, -1, 32, 127, 128, 161, 200, 255, 300])
            if code == 32:
                custom = rng.choice(CUSTOM_CODES)
        else:
            name, code, custom = "CUSTOM", 32, rng.choice(CUSTOM_CODES)
        first = len(tensors) - 1
        n_in = need + rng.choice([0, 0, 0, 1]) if rng.random() < 0.85 else rng.choice([0, 1, 2, 3, 4])
        inputs = [first] + [len(tensors) + i for i in range(max(0, n_in - 1))]
        for i in range(max(0, n_in - 1)):
            tensors.append(_tensor(rng, writer, f"c{k}_{i}", rng.random() < 0.85,
                                   dtype if rng.random() < 0.6 else rng.choice(("int32", "int64", "float32", None))))
        if n_in == 0:
            inputs = []
        elif rng.random() < 0.1:
            inputs[rng.randrange(len(inputs))] = rng.choice([-1, -2, len(tensors) + 5])
        outputs = [len(tensors) + i for i in range(rng.choice([1, 1, 1, 2]))]
        for i in range(len(outputs)):
            tensors.append(_tensor(rng, writer, f"y{k}_{i}", False, dtype if rng.random() < 0.8 else None))
        options = _options(rng, name)
        custom_options = bytes(rng.randrange(256) for _ in range(rng.choice([1, 4, 16, 64]))) \
            if rng.random() < 0.15 else None
        ops.append(writer.Op(code, inputs, outputs, options, custom, custom_options=custom_options))
    outputs = ops[-1].outputs if rng.random() < 0.9 else [rng.randrange(len(tensors))]
    return writer.model(tensors, ops, [0], list(outputs))
