"""The load functor: constants become read-only arrays that stay in flash, or, when asked,
initialised arrays that the startup code copies to RAM (faster to read on parts whose flash
has wait states, at the cost of RAM)."""
from __future__ import annotations

from tinsmith.escape import c_comment
from tinsmith.generate.backend import CPP
from tinsmith.generate.render import element_literals
from tinsmith.ir import Constant

_PER_LINE = 8


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
