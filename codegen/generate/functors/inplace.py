"""In-place variants: kernels that read their input in an order letting the output take over its
bytes, at some cost in speed. The memory plan runs one only where it makes the workspace smaller
(tinsmith.planners.overlap traces each variant's access order; tinsmith.plan chooses), and the
generator then calls it instead of the backend's functor.

`pointwise_per_pixel`: a 1x1 convolution (stride 1, no padding, no groups) that copies a block of
positions' input channels into a scratch buffer, then computes every output channel of those
positions from the buffer. Output positions are written after their input positions were read
and before any later position is, so in NCHW the output may start at the input's first byte
whatever the channel counts: the workspace holds the larger of the two plus a few pixels.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from tinsmith.generate.backend import KernelArgs, Traits, kernel_args
from tinsmith.generate.functors.conv import Affine
from tinsmith.generate.loop_ir import Assign, Binary, For, Load, Local, Scratch, Store, Var, const, index


@dataclass(frozen=True)
class Variant:
    """An in-place kernel for `op`, where `applies(args, attrs)` holds; `traits` as a registration's."""

    name: str
    op: str
    applies: Callable[[KernelArgs, Mapping[str, Any]], bool]
    traits: Traits


VARIANTS: dict[str, Variant] = {}


def register_variant(name: str, op: str, applies, scratch, epilogue: bool = True):
    """Decorator: the functor is in-place variant `name` of `op`."""
    def add(fn):
        if name in VARIANTS:
            raise ValueError(f"in-place variant '{name}' is registered twice")
        VARIANTS[name] = Variant(name, op, applies, Traits(fn, epilogue, scratch))
        return fn
    return add


def _is_plain_pointwise(args: KernelArgs, attrs) -> bool:
    x, y = args.inputs[0], args.outputs[0]
    if args.prepared is None or x.type.rank != 4 or x.type.dtype != "float32" or args.inputs[1] is None:
        return False
    wins = args.prepared["windows"]
    return args.prepared["group"] == 1 and len(wins) == 2 and all(
        w.kernel == 1 and w.stride == 1 and w.pad_begin == 0 and w.in_size == w.out_size for w in wins) \
        and y.type.dtype == "float32"


PIXELS, CHANNELS = 4, 4  # a block of positions times output channels kept in registers


@register_variant("pointwise_per_pixel", "Conv", _is_plain_pointwise,
                  scratch=lambda prepared, caps: [Scratch("pixel", "float32", PIXELS * prepared.inputs[0].shape[1])])
def pointwise_per_pixel(graph, node_id, cluster_id, args, attrs):
    """Per block of PIXELS positions: their input channels into `pixel`, then every output channel
    of those positions, CHANNELS at a time (PIXELS x CHANNELS accumulators, each input and weight
    loaded once per block). Positions and channels left over run in smaller blocks."""
    x, w, y = args.inputs[0], args.inputs[1], args.outputs[0]
    b = args.inputs[2] if len(args.inputs) > 2 else None
    batch, channels, height, width = x.type.shape
    out_channels = y.type.shape[1]
    hw = height * width
    n, c = Affine.var("n"), Affine.var("c")

    def block(p0: Affine, pixels: int) -> list:
        """Positions p0 .. p0 + pixels - 1: gather them, then all output channels."""
        gather = For("c", channels, tuple(
            Store("pixel", (c * pixels + j).expr(), Load(x.name, (n * (channels * hw) + c * hw + p0 + j).expr()))
            for j in range(pixels)))

        def outputs(m0: Affine, count: int) -> list:
            accs = [[f"acc{i}_{j}" for j in range(pixels)] for i in range(count)]
            init = [Load(b.name, (m0 + i).expr()) if b is not None else const(0) for i in range(count)]
            body = [Local(f"w{i}", Load(w.name, ((m0 + i) * channels + c).expr())) for i in range(count)]
            body += [Local(f"x{j}", Load("pixel", (c * pixels + j).expr())) for j in range(pixels)]
            body += [Assign(accs[i][j], Binary("+", Var(accs[i][j]), Binary("*", Var(f"x{j}"), Var(f"w{i}"))))
                     for i in range(count) for j in range(pixels)]
            stmts = [Local(accs[i][j], init[i]) for i in range(count) for j in range(pixels)]
            stmts.append(For("c", channels, tuple(body)))
            for i in range(count):
                for j in range(pixels):
                    pos = (p0 + j).expr()
                    stmts.append(Store(y.name, (n * (out_channels * hw) + (m0 + i) * hw + p0 + j).expr(),
                                       Var(accs[i][j]), (n.expr(), (m0 + i).expr(), Binary("/", pos, index(width)),
                                                         Binary("%", pos, index(width)))))
            return stmts
        full = out_channels // CHANNELS * CHANNELS
        stmts = [gather]
        if full:
            stmts.append(For("m", full, tuple(outputs(Affine.var("m"), CHANNELS)), CHANNELS))
        if out_channels > full:
            stmts.append(For("m", out_channels - full, tuple(outputs(Affine.var("m") + full, 1))))
        return stmts

    whole = hw // PIXELS * PIXELS
    body = []
    if whole:
        body.append(For("p", whole, tuple(block(Affine.var("p"), PIXELS)), PIXELS))
    if hw > whole:
        body += block(Affine(const=whole), hw - whole)
    return [For("n", batch, tuple(body))]


def applicable_variants(graph, sched, backend, caps) -> dict[str, str]:
    """Kernel head -> the first registered variant that applies to it."""
    found = {}
    for node, _ in sched.kernel_heads():
        for v in VARIANTS.values():
            if v.op == node.op and v.applies(kernel_args(graph, node, caps), node.attrs):
                found[node.name] = v.name
                break
    return found


def variant_functor(name: str) -> tuple[Callable, Traits]:
    v = VARIANTS[name]
    return v.traits.fn, v.traits


__all__ = ["VARIANTS", "Variant", "register_variant", "applicable_variants", "variant_functor"]
