"""Worst-case stack of a model's entry points: the deepest path through the call graph, summing
each function's own frame.

The call graph is read from the machine code (relocations and branch targets), so it holds
exactly the calls the compiler emitted, including the ones it adds itself (soft-float
helpers, memset for a zeroing loop). Functions of the model's object get the compiler's
frame (.ci/.su); functions it calls from libraries are found in a linked image (the
firmware, or a probe linked from the model object alone) and bounded from their
disassembly. On a hosted target the libraries are shared objects the image does not hold,
so each call out of the model is bounded by HOSTED_EXTERNAL_CALL_BYTES instead.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from tinsmith.measure.binutils import Binary, Function, computed_jumps, function_at, transfers
from tinsmith.measure.frames import Frame, frame_from_disassembly

# A hosted target's libm and libc functions are leaf functions with frames under 256 bytes,
# but the first call through the PLT runs the dynamic linker's lazy binding, which saves the
# extended register state (up to 2.7 KB with AVX-512) and walks the symbol tables. 4 KiB covers
# both; the hosted figure is informative (the host's stack is megabytes).
HOSTED_EXTERNAL_CALL_BYTES = 4096

INDIRECT = "<indirect call>"


@dataclass(frozen=True)
class Node:
    symbol: str
    origin: str                 # "model", "library" (from the linked image) or "external"
    frame: Frame
    calls: tuple[str, ...]      # callee symbols, in the order of their first call
    size: int = 0               # bytes of code
    computed_jumps: int = 0     # taken to be switch tables within the function


@dataclass(frozen=True)
class Deepest:
    """The deepest call path from one entry point."""

    entry: str
    bytes: int | None           # None when some function on a path is unbounded
    path: tuple[str, ...]       # from the entry down; for an unbounded figure, to the culprit
    why_unbounded: str | None = None


def _callees(binary: Binary, fn: Function) -> tuple[list[str], str | None]:
    """Symbols `fn` calls or jumps to, and why it is unbounded if a transfer cannot be followed."""
    found: list[str] = []
    problem = None
    sections = {s.name for s in binary.sections}
    for t in transfers(binary, fn):
        callee = None
        if t.target is not None and t.target in binary.functions:
            callee = t.target
        elif t.target is not None and t.target in sections:
            # A relocation against a section (a local function in another section): the
            # addend, less the PC bias of x86's PC-relative forms, is the offset in it.
            offset = t.instruction.addend + (4 if binary.arch == "x86-64" else 0)
            hit = function_at(binary, t.target, max(offset, 0))
            callee = hit.symbol if hit else None
            if callee is None:
                problem = f"cannot tell which function '{t.instruction}' at 0x{t.instruction.address:x} reaches"
        elif t.target is not None:
            callee = t.target  # defined elsewhere: an external function
        elif t.target_address is not None:
            hit = function_at(binary, fn.section, t.target_address)
            if hit is None:
                problem = f"'{t.instruction}' at 0x{t.instruction.address:x} leaves {fn.symbol} for no known function"
            else:
                callee = hit.symbol
        else:
            callee = INDIRECT
        if callee is not None and callee != fn.symbol and callee not in found:
            found.append(callee)
    return found, problem


def _node(binary: Binary, fn: Function, origin: str, frame: Frame) -> Node:
    calls, problem = _callees(binary, fn)
    if problem is not None and frame.bytes is not None:
        frame = Frame(None, frame.how, problem)
    return Node(fn.symbol, origin, frame, tuple(calls), fn.size, len(computed_jumps(binary, fn)))


def _library_function(image: Binary, symbol: str) -> Function | None:
    if symbol in image.functions:
        return image.functions[symbol]
    for s in image.symbols:  # an alias without its own FUNC symbol
        if s.name == symbol and s.section != "*UND*":
            return function_at(image, None, s.address)
    return None


def call_graph(model: Binary, compiler_frames: Mapping[str, Frame], image: Binary | None,
               image_label: str | None, hosted: bool) -> dict[str, Node]:
    """Every function reachable from the model's functions, with its frame and callees."""
    graph: dict[str, Node] = {}
    # Identical functions folded into one (GCC's ICF) share an address but only the
    # survivor has a compiler figure: aliases take it.
    by_place = {(f.section, f.address): compiler_frames[f.symbol]
                for f in model.functions.values() if f.symbol in compiler_frames}
    for fn in model.functions.values():
        frame = compiler_frames.get(fn.symbol) or by_place.get((fn.section, fn.address)) or \
            frame_from_disassembly(model.arch, fn, f"disassembly of {model.path.name} (no compiler figure)")
        graph[fn.symbol] = _node(model, fn, "model", frame)
    pending = [c for n in list(graph.values()) for c in n.calls]
    while pending:
        symbol = pending.pop()
        if symbol in graph:
            continue
        if symbol == INDIRECT:
            graph[symbol] = Node(symbol, "external", Frame(None, "-", "a call through a pointer can reach any code"), ())
            continue
        fn = _library_function(image, symbol) if image is not None else None
        if fn is not None:
            node = _node(image, fn, "library", frame_from_disassembly(image.arch, fn, f"disassembly of {image_label}"))
            # Keyed by the name the caller used; the image may know the code by an alias.
            graph[symbol] = Node(symbol, node.origin, node.frame, node.calls, node.size, node.computed_jumps)
            pending += node.calls
        elif hosted:
            graph[symbol] = Node(symbol, "external", Frame(
                HOSTED_EXTERNAL_CALL_BYTES, f"hosted margin for a shared-library call ({HOSTED_EXTERNAL_CALL_BYTES} B)"), ())
        else:
            where = f"not in {image_label}" if image is not None else "no linked image to look it up in"
            graph[symbol] = Node(symbol, "external", Frame(None, "-", f"its code is unknown ({where})"), ())
    return graph


def deepest(graph: Mapping[str, Node], entry: str) -> Deepest:
    """The stack `entry` needs: its frame plus its deepest callee's, recursively. A cycle
    (recursion) or an unbounded frame makes the figure unbounded, naming where."""
    memo: dict[str, Deepest] = {}
    active: set[str] = set()

    def visit(symbol: str) -> Deepest:
        if symbol in memo:
            return memo[symbol]
        node = graph[symbol]
        if node.frame.bytes is None:
            return memo.setdefault(symbol, Deepest(symbol, None, (symbol,), f"{symbol}: {node.frame.why_unbounded}"))
        active.add(symbol)
        best = Deepest(symbol, node.frame.bytes, (symbol,))
        for callee in node.calls:
            if callee in active:
                best = Deepest(symbol, None, (symbol, callee), f"{callee} is called recursively, so its depth is "
                                                               f"not bounded statically")
                break
            below = visit(callee)
            if below.bytes is None:
                best = Deepest(symbol, None, (symbol,) + below.path, below.why_unbounded)
                break
            if node.frame.bytes + below.bytes > best.bytes:
                best = Deepest(symbol, node.frame.bytes + below.bytes, (symbol,) + below.path)
        active.discard(symbol)
        memo[symbol] = best
        return best

    result = visit(entry)
    return Deepest(entry, result.bytes, result.path, result.why_unbounded)


def reachable(graph: Mapping[str, Node], entries) -> list[str]:
    """Symbols reachable from `entries`, entries first, in depth-first order."""
    seen: list[str] = []
    stack = list(reversed(list(entries)))
    while stack:
        symbol = stack.pop()
        if symbol in seen or symbol not in graph:
            continue
        seen.append(symbol)
        stack += reversed(graph[symbol].calls)
    return seen
