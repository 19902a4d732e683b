"""Functors for BatchNormalization (inference), InstanceNormalization and LRN."""
from __future__ import annotations

from tinsmith.generate.backend import CPP, same
from tinsmith.generate.functors.conv import Affine, Axis, TileLoops, accumulate, loops, tiles, window_nests
from tinsmith.generate.loop_ir import Binary, Expr, For, Load, Local, Select, Stmt, Store, Unary, Var, const
from tinsmith.ops.conv import Window
from tinsmith.ops.normalization import lrn_span


def _plane_index(n: str, c: str, channels: int, size: int) -> Expr:
    """Offset of spatial position j in plane (n, c) of an (N, C, size) tensor."""
    return Affine((( n, channels * size), (c, size), ("j", 1))).expr()


@CPP.register("BatchNormalization", family="reduction", types=same("float32", 5))
def batch_norm(graph, node_id, cluster_id, args, attrs):
    """y = (x - mean) * scale + bias with scale = gamma / sqrt(var + epsilon) computed once per
    channel; subtracting the mean first keeps the rounding of the ONNX formula."""
    x, gamma, beta, mean, var = args.inputs
    y = args.outputs[0]
    batch, channels = x.type.shape[:2]
    size = x.type.size // (batch * channels)
    at = _plane_index("n", "c", channels, size)
    c = Var("c")
    per_channel = [
        Local("scale", Binary("/", Load(gamma.name, c),
                              Unary("sqrt", Binary("+", Load(var.name, c), const(attrs["epsilon"]))))),
        Local("mean", Load(mean.name, c)),
        Local("shift", Load(beta.name, c)),
    ]
    value = Binary("+", Binary("*", Binary("-", Load(x.name, at), Var("mean")), Var("scale")), Var("shift"))
    return [For("c", channels, (*per_channel, *loops((("n", batch), ("j", size)), [Store(y.name, at, value)])))]


@CPP.register("InstanceNormalization", family="reduction", types=same("float32", 3))
def instance_norm(graph, node_id, cluster_id, args, attrs):
    """Per (batch, channel) plane: the mean, then the variance about it (two passes, as accurate as
    the ONNX formula), then y = (x - mean) * scale + bias."""
    x, gamma, beta = args.inputs
    y = args.outputs[0]
    batch, channels = x.type.shape[:2]
    size = x.type.size // (batch * channels)
    at = _plane_index("n", "c", channels, size)
    v, c = Load(x.name, at), Var("c")
    centered = Binary("-", v, Var("mean"))
    body: list[Stmt] = [
        Local("sum", const(0)),
        For("j", size, (accumulate("sum", v),)),
        Local("mean", Binary("/", Var("sum"), const(size))),
        Local("squares", const(0)),
        For("j", size, (accumulate("squares", Binary("*", centered, centered)),)),
        Local("scale", Binary("/", Load(gamma.name, c), Unary("sqrt", Binary(
            "+", Binary("/", Var("squares"), const(size)), const(attrs["epsilon"]))))),
        Local("shift", Load(beta.name, c)),
        For("j", size, (Store(y.name, at, Binary("+", Binary("*", centered, Var("scale")), Var("shift"))),)),
    ]
    return loops((("n", batch), ("c", channels)), body)


@CPP.register("LRN", family="window", types=same("float32"))
def lrn(graph, node_id, cluster_id, args, attrs):
    """y = x / (bias + alpha / size * sum of x^2 over nearby channels) ** beta. The channel window
    is a 1-D sliding window, cut into segments like a convolution's so only the first and last
    channels clip it."""
    x, y = args.inputs[0], args.outputs[0]
    batch, channels = x.type.shape[:2]
    size = x.type.size // (batch * channels)
    before, after = lrn_span(attrs["size"])
    win = Window(channels, channels, attrs["size"], 1, 1, before, after)
    n, j = Affine.var("n"), Affine.var("j")

    def body(tl: TileLoops, suffix: str) -> list[Stmt]:
        acc = "sum"  # declared inside the loop over positions j: no suffix needed
        at = (n * (channels * size) + tl.out_pos[0] * size + j).expr()
        v = Load(x.name, (n * (channels * size) + tl.in_pos[0] * size + j).expr())
        square: Expr = Binary("*", v, v)
        if tl.in_bounds is not None:
            square = Select(tl.in_bounds, square, const(0))
        base = Binary("+", const(attrs["bias"]), Binary("*", const(attrs["alpha"] / attrs["size"]), Var(acc)))
        beta = attrs["beta"]
        denominator = base if beta == 1 else Unary("sqrt", base) if beta == 0.5 else Binary("pow", base, const(beta))
        return [For("j", size, (Local(acc, const(0)), *loops(tl.taps, [accumulate(acc, square)]),
                                Store(y.name, at, Binary("/", Load(x.name, at), denominator))))]
    return [For("n", batch, tuple(window_nests([Axis(win)], tiles([win]), body)))]
