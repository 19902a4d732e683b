"""Names the pipeline makes up for values, nodes and constants it adds to a graph."""
from __future__ import annotations

from collections.abc import Container


def numbered(base: str, taken: Container[str]) -> str:
    """`base` if it is free, else the first free one of base_2, base_3, ...

    Callers add the result to `taken` themselves when later names must avoid it too."""
    name, k = base, 2
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    return name
