"""Functors for BatchNormalization (inference), InstanceNormalization and LRN."""
from __future__ import annotations

from dataclasses import dataclass

from tinsmith.generate.backend import CPP, same
from tinsmith.generate.functors import reduction_nest as nest_
from tinsmith.generate.functors.conv import accumulate
from tinsmith.generate.functors.reduction_nest import Passes, ReductionNest, ReductionSchedule, local, sweep
from tinsmith.generate.functors import window_nest
from tinsmith.generate.functors.window_nest import WindowNest, WindowOutput, WindowSchedule, WindowTap
from tinsmith.generate.loop_ir import Binary, Expr, Load, Local, Select, Stmt, Store, Unary, Var, const

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


@dataclass(frozen=True)
class LocalResponse:
    """LRN's window micro-kernel: the sum of the squares of the channels the window covers (taps in
    the padding add nothing), then the centre element over (bias + alpha / size * sum) ** beta."""

    x: str
    bias: float
    scale: float  # alpha / size
    beta: float

    def start(self, scope: str, out: WindowOutput) -> list[Stmt]:
        return [Local(f"sum{scope}", const(0))]

    def step(self, scope: str, tap: WindowTap) -> list[Stmt]:
        square: Expr = Binary("*", tap.value, tap.value)
        return [accumulate(f"sum{scope}", square if tap.inside is None else Select(tap.inside, square, const(0)))]

    def finish(self, scope: str, out: WindowOutput) -> list[Stmt]:
        base = Binary("+", const(self.bias), Binary("*", const(self.scale), Var(f"sum{scope}")))
        beta = self.beta
        denominator = base if beta == 1 else Unary("sqrt", base) if beta == 0.5 else Binary("pow", base, const(beta))
        return [Store(out.y, out.at, Binary("/", Load(self.x, out.at), denominator), out.coords)]

    def empty(self, scope: str, out: WindowOutput) -> list[Stmt]:
        return [*self.start(scope, out), *self.finish(scope, out)]


# the window's one spatial axis is the channels; the positions are the nest's "channels", a loop j
ACROSS_CHANNELS = WindowSchedule(channels="inner", channel_loop=True, channel_var="j")


@CPP.register("LRN", family="window", types=same("float32"))
def lrn(graph, node_id, cluster_id, args, attrs):
    """y = x / (bias + alpha / size * sum of x^2 over nearby channels) ** beta: the window nest over
    the input viewed channels last as (batch, channels, positions), so its tiles cut the channel
    window like a convolution's and only the first and last channels clip it."""
    view, x, y = tuple(args.prepared["view"]), args.inputs[0].name, args.outputs[0].name
    batch, _, positions = view
    nest = WindowNest(x, y, view, view, batch, positions, tuple(args.prepared["windows"]), channels_last=True)
    micro = LocalResponse(x, attrs["bias"], attrs["alpha"] / attrs["size"], attrs["beta"])
    return window_nest.window(nest, ACROSS_CHANNELS, micro)
