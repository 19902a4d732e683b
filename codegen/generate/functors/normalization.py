"""Functors for BatchNormalization (inference), InstanceNormalization and LRN."""
from __future__ import annotations

from tinsmith.generate.backend import CPP, same
from tinsmith.generate.functors import reduction_nest as nest_
from tinsmith.generate.functors.reduction_nest import Passes, ReductionNest, ReductionSchedule, local, sweep
from tinsmith.generate.functors.conv import Affine, Axis, TileLoops, accumulate, loops, tiles, window_nests
from tinsmith.generate.loop_ir import Binary, Expr, For, Load, Local, Select, Stmt, Store, Unary, Var, const
from tinsmith.ops.conv import Window
from tinsmith.ops.normalization import lrn_span

# (batch, channels, positions): BatchNormalization's channels outermost, the batch and positions inside;
# InstanceNormalization's planes (n, c), the positions of each inside
CHANNELS = ReductionSchedule(kept=("c",), reduced=("n", "j"))
PLANES = ReductionSchedule(kept=("n", "c"), reduced=("j",))


@CPP.register("BatchNormalization", family="reduction", types=same("float32", 5))
def batch_norm(graph, node_id, cluster_id, args, attrs):
    """y = (x - mean) * scale + bias with scale = gamma / sqrt(var + epsilon) computed once per
    channel (the kept axis; the batch and positions are walked inside it); subtracting the mean
    first keeps the rounding of the ONNX formula."""
    x, gamma, beta, mean, var = (a.name for a in args.inputs)
    y = args.outputs[0].name

    def per_channel(row):
        c = row.kept_vars[0]
        value = Binary("+", Binary("*", Binary("-", Load(x, row.at()), Var("mean")), Var("scale")), Var("shift"))
        return [Local("scale", Binary("/", Load(gamma, c),
                                      Unary("sqrt", Binary("+", Load(var, c), const(attrs["epsilon"]))))),
                Local("mean", Load(mean, c)), Local("shift", Load(beta, c)), row.sweep(Store(y, row.at(), value))]
    return nest_.reduction(ReductionNest.of(args), CHANNELS, Passes((per_channel,)))


@CPP.register("InstanceNormalization", family="reduction", types=same("float32", 3))
def instance_norm(graph, node_id, cluster_id, args, attrs):
    """Per (batch, channel) plane: the mean, then the variance about it (two passes, as accurate as
    the ONNX formula), then y = (x - mean) * scale + bias."""
    x, gamma, beta = (a.name for a in args.inputs)
    y = args.outputs[0].name
    size = ReductionNest.of(args).count

    def centered(row):
        return Binary("-", Load(x, row.at()), Var("mean"))
    return nest_.reduction(ReductionNest.of(args), PLANES, Passes((
        local("sum", lambda row: const(0)), sweep(lambda row: [accumulate("sum", Load(x, row.at()))]),
        local("mean", lambda row: Binary("/", Var("sum"), const(size))),
        local("squares", lambda row: const(0)),
        sweep(lambda row: [accumulate("squares", Binary("*", centered(row), centered(row)))]),
        local("scale", lambda row: Binary("/", Load(gamma, row.kept_vars[1]), Unary("sqrt", Binary(
            "+", Binary("/", Var("squares"), const(size)), const(attrs["epsilon"]))))),
        local("shift", lambda row: Load(beta, row.kept_vars[1])),
        sweep(lambda row: [Store(y, row.at(), Binary("+", Binary("*", centered(row), Var("scale")), Var("shift")))]))))


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
