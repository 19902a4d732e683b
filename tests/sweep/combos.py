"""Element-type combinations of a probe, the graph file of one combination, and its seeded data."""
from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from tinsmith.ir.graph import DTYPES
from tests.sweep.probes import ALL, Probe, Slot


@dataclass(frozen=True)
class Combo:
    """One probe with one element type per slot; `name` is the graph's (and C++ namespace's) name."""

    probe: Probe
    types: tuple[tuple[str, str], ...]  # (slot, dtype), in slot order
    name: str

    @property
    def label(self) -> str:
        return " ".join(f"{s}={d}" for s, d in self.types)

    def dtype(self, slot: str) -> str:
        return slot if slot in DTYPES else dict(self.types)[slot]

    @property
    def attrs(self) -> dict[str, Any]:
        return {k: self.dtype(v.name) if isinstance(v, Slot) else v for k, v in self.probe.attrs.items()}


def free_slots(probe: Probe) -> list[str]:
    """The probe's slots that are not a fixed type, in first-use order (inputs, then attributes)."""
    used = [i.slot for i in probe.inputs if i is not None] + \
        [v.name for v in probe.attrs.values() if isinstance(v, Slot)]
    return [s for s in dict.fromkeys(used) if s not in DTYPES]


def assignments(probe: Probe) -> list[tuple[tuple[str, str], ...]]:
    """Uniform assignments (every free slot the same type, for each type), then the product of the
    slots' candidate sets when the probe has more than one slot; no duplicates, fixed order."""
    slots = free_slots(probe)
    out = [tuple((s, d) for s in slots) for d in ALL]
    if len(slots) > 1:
        out += [tuple(zip(slots, pick)) for pick in itertools.product(*(probe.candidates(s) for s in slots))]
    return list(dict.fromkeys(out))


def all_combos(probes) -> list[Combo]:
    """Every combination of every probe, named sw0000_op, sw0001_op, ... in a fixed order."""
    combos = []
    for probe in probes:
        for types in assignments(probe):
            combos.append(Combo(probe, types, f"sw{len(combos):04d}_{probe.op.lower()}"))
    return combos


# --- graph file -------------------------------------------------------------------------------
def input_names(probe: Probe) -> list[str]:
    return [f"x{i}" if i_ is not None else "" for i, i_ in enumerate(probe.inputs)]


def output_names(probe: Probe) -> list[str]:
    return [f"y{k}" for k in range(probe.outputs)]


def graph_yaml(combo: Combo) -> str:
    """The graph file: runtime inputs as graph inputs, constant operands as `value` constants."""
    probe = combo.probe
    names = input_names(probe)
    inputs, constants = {}, {}
    for name, spec in zip(names, probe.inputs):
        if spec is None:
            continue
        if spec.const is None:
            inputs[name] = {"dtype": combo.dtype(spec.slot), "shape": list(spec.shape)}
        else:
            constants[name] = {"value": spec.const, "dtype": combo.dtype(spec.slot)}
    node = {"op": probe.op, "name": "probe", "inputs": names, "outputs": output_names(probe)}
    if combo.attrs:
        node["attrs"] = combo.attrs
    doc = {"graph": combo.name, "inputs": inputs or {"unused": {"dtype": "float32", "shape": [1]}},
           "outputs": output_names(probe), "nodes": [node]}
    if constants:
        doc["constants"] = constants
    # JSON is YAML; one flow mapping per key keeps the file readable in a finding's report
    return "\n".join(f"{k}: {json.dumps(v)}" for k, v in doc.items()) + "\n"


# --- data -------------------------------------------------------------------------------------
def _floats(rng, domain: str, shape) -> np.ndarray:
    if domain == "pos":
        return rng.uniform(0.5, 3.0, shape)
    if domain == "pos1":
        return rng.uniform(1.0, 3.0, shape)
    if domain == "unit":
        return rng.uniform(-0.9, 0.9, shape)
    if domain == "nonzero":
        return rng.uniform(0.5, 3.0, shape) * rng.choice([-1, 1], shape)
    if domain == "shift":
        return rng.integers(0, 4, shape).astype(np.float64)
    if domain == "grid":
        return rng.uniform(-1.0, 1.0, shape)
    if domain == "pixel":
        return rng.uniform(-0.5, 4.5, shape)
    if domain.startswith("idx"):
        return rng.integers(0, int(domain[3:]), shape).astype(np.float64)
    return rng.standard_normal(shape) * 2.0


def _integers(rng, domain: str, shape, dtype: np.dtype) -> np.ndarray:
    signed = dtype.kind == "i"
    lo, hi = {"pos": (1, 6), "pos1": (1, 6), "unit": (-1 if signed else 0, 2), "shift": (0, 4),
              "nonzero": (1, 6), "grid": (-1 if signed else 0, 2), "pixel": (0, 5)}.get(
        domain, (-9 if signed else 0, 10))
    if domain.startswith("idx"):
        lo, hi = 0, int(domain[3:])
    v = rng.integers(lo, hi, shape)
    if domain == "nonzero" and signed:
        v = v * rng.choice([-1, 1], shape)
    return v


def runtime_data(combo: Combo, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded data for every runtime input, drawn from its domain in its element type."""
    rng = np.random.default_rng(seed)
    data = {}
    for name, spec in zip(input_names(combo.probe), combo.probe.inputs):
        if spec is None or spec.const is not None:
            continue
        dtype = DTYPES[combo.dtype(spec.slot)][0]
        if dtype == np.bool_:
            data[name] = rng.integers(0, 2, spec.shape).astype(np.bool_)
        elif dtype.kind in "iu":
            data[name] = _integers(rng, spec.domain, spec.shape, dtype).astype(dtype)
        else:
            values = _floats(rng, spec.domain, spec.shape)
            if combo.dtype(spec.slot) == "float8_e8m0fnu":  # powers of two without a sign: no NaNs
                values = np.abs(values)
            with np.errstate(all="ignore"):
                data[name] = values.astype(dtype)
    if not data:
        data["unused"] = np.zeros(1, np.float32)
    return data


def reference_inputs(combo: Combo, runtime: Mapping[str, np.ndarray]) -> list[np.ndarray | None]:
    """The node's operands in order, constants in their declared types, as the reference takes them."""
    out = []
    for name, spec in zip(input_names(combo.probe), combo.probe.inputs):
        if spec is None:
            out.append(None)
        elif spec.const is None:
            out.append(runtime[name])
        else:
            out.append(np.asarray(spec.const).astype(DTYPES[combo.dtype(spec.slot)][0]))
    return out
