"""What the report page says about one layer beyond its figures: the operator's attributes, the
weights it reads (shape, element type, quantization) and the flash it takes (its constants and,
once measured from the object file, its kernel's code); and readable names for scratch buffers.

Everything comes from the report (NAME.plan.json or NAME.json): the generator writes each
node's attributes and the shape, type and quantization of every constant.
"""
from __future__ import annotations

import re
from typing import Mapping, Sequence

# attribute name -> label, in the order a reader looks for them; the rest follow by name
_LABELS = {"kernel_shape": "kernel", "strides": "strides", "pads": "pads", "dilations": "dilations",
           "group": "groups", "depth_multiplier": "depth multiplier", "axis": "axis", "transB": "transB"}
_DEFAULT = {"dilations": 1, "group": 1, "depth_multiplier": 1}  # not worth showing when every entry is this
_KERNEL_FUNCTION = re.compile(r"::kernels::(\w+)\(")


def _value_text(value) -> str:
    if isinstance(value, list):
        return "×".join(map(str, value)) if value and all(isinstance(v, int) for v in value) else \
            ", ".join(map(str, value))
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def attributes_text(attrs: Mapping | None) -> str:
    """`kernel 3×3 · strides 2×2 · pads 0×0×1×1 · groups 8`: the attributes a reader looks for
    first, defaults left out, then the others by name."""
    if not attrs:
        return ""
    shown = []
    for key in [*[k for k in _LABELS if k in attrs], *sorted(k for k in attrs if k not in _LABELS)]:
        value = attrs[key]
        default = _DEFAULT.get(key)
        if default is not None and (value == default or (isinstance(value, list) and set(value) == {default})):
            continue
        shown.append(f"{_LABELS.get(key, key)} {_value_text(value)}")
    return " · ".join(shown)


def quant_text(q: Mapping | None) -> str:
    """`scale 0.0246, zero point -128`, or per channel: `64 scales 0.00152–0.00583, zero point 0`."""
    if not q:
        return ""
    if "scale" in q:
        return f"scale {q['scale']:.3g}, zero point {q['zero_point']}"
    zps = q.get("zero_points") or []
    zp = f", zero point {zps[0]}" if len(zps) == 1 else f", zero points {', '.join(map(str, zps))}"
    return f"{q['channels']} scales {q['scale_min']:.3g}–{q['scale_max']:.3g} (axis {q['axis']}){zp}"


def weights(node_inputs: Sequence[str], constants: Mapping[str, Mapping]) -> list[dict]:
    """The constants a node reads, each with its shape, element type and quantization."""
    result = []
    for name in dict.fromkeys(v for v in node_inputs if v in constants):
        c = constants[name]
        shape = "×".join(map(str, c.get("shape", ()))) or "scalar"
        result.append({"name": name, "bytes": c.get("bytes", 0),
                       "text": f"{shape} {c.get('dtype', '')}".strip()
                       + (f" ({quant_text(c['quant'])})" if c.get("quant") else "")})
    return result


def kernel_code_bytes(report: Mapping) -> dict[str, int]:
    """Code bytes of each kernel function, by kernel name, where the report measured them (a
    kernel the compiler inlined into call() has no function of its own)."""
    sizes: dict[str, int] = {}
    for f in (report.get("flash") or {}).get("functions", ()):
        for name in [f.get("name", ""), *f.get("aliases", ())]:
            m = _KERNEL_FUNCTION.search(name)
            if m:
                sizes[m.group(1)] = sizes.get(m.group(1), 0) + int(f.get("bytes", 0))
    return sizes


def scratch_label(name: str, values: Mapping[str, Mapping]) -> str | None:
    """`scratch 'pixel' of pw1` for a kernel's scratch buffer (planned as KERNEL.BUFFER, with no
    value of the graph behind it); None for a graph value."""
    if name in values or "." not in name:
        return None
    kernel, _, buffer = name.rpartition(".")
    return f"scratch '{buffer}' of {kernel}"
