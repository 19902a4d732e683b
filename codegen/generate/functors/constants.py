"""The load functor: constants become read-only arrays that stay in flash, or, when asked,
initialised arrays that the startup code copies to RAM (faster to read on parts whose flash
has wait states, at the cost of RAM)."""
from __future__ import annotations

import numpy as np

from tinsmith.escape import c_comment
from tinsmith.generate.backend import CPP
from tinsmith.generate.render import double_literal, float_literals
from tinsmith.ir import Constant

_PER_LINE = 8


def element_literals(flat: np.ndarray) -> list[str]:
    """Each element of a one-dimensional array as a C++ literal of the type generated code stores
    it in: its exact value, or, for a storage type (float16, bfloat16, the float8 formats, float4,
    the 4- and 2-bit integers: tinsmith.ir.graph.DTYPES), its bits as NumPy holds them."""
    if flat.dtype == np.float32:
        items = float_literals(flat)
    elif flat.dtype == np.float64:
        items = [double_literal(float(v)) for v in flat]
    elif flat.dtype.kind not in "iub":  # a storage type: 2 bytes (uint16_t) or 1 (uint8_t)
        digits = 2 * flat.dtype.itemsize
        items = [f"0x{int(v):0{digits}x}u" for v in flat.view(np.uint16 if digits == 4 else np.uint8)]
    elif flat.dtype == np.int64:
        items = ["INT64_MIN" if int(v) == -2 ** 63 else f"INT64_C({int(v)})" for v in flat]
    elif flat.dtype == np.uint64:
        items = [f"UINT64_C({int(v)})" for v in flat]
    elif flat.dtype == np.uint32:
        items = [f"{int(v)}u" for v in flat]
    elif flat.dtype == np.int32:  # -2^31 is no literal: 2^31 does not fit an int
        items = ["INT32_MIN" if int(v) == -2 ** 31 else str(int(v)) for v in flat]
    else:  # quantized data and int32 biases: every value fits an int literal
        items = [str(int(v)) for v in flat]
    return items


@CPP.register_loader
def emit_constant(constant: Constant, in_ram: bool = False) -> str:
    """C++ definition of a constant array (exact values, 8 per line); `const` keeps it in flash."""
    t = constant.type
    items = element_literals(constant.data.reshape(-1))
    rows = [", ".join(items[i:i + _PER_LINE]) for i in range(0, len(items), _PER_LINE)]
    body = ",\n  ".join(rows)
    qualifier = "" if in_ram else "const "
    where = ", copied to RAM at startup" if in_ram else ""
    return (f"// {constant.name}: {t} from {c_comment(constant.source)}{where}\n"
            f"alignas(16) {qualifier}{t.cpp_type} {constant.name}[{t.size}] = {{\n  {body}\n}};")
