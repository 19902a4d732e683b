"""Command line: `python -m tinsmith COMMAND` (also installed as `tinsmith`).

Exit status: 0 on success, 1 on a user error (printed as path:line:col: error: ...),
2 on bad usage.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Sequence

from tinsmith import limits
from tinsmith.errors import TinsmithError
from tinsmith.escape import one_line
from tinsmith.paths import scons_toolpath
from tinsmith.limits import Limits

# What a build is for unless --target says otherwise: the portable host library, every x86-64 level's
# kernels in one NAME.cpp, the widest the CPU has chosen when it runs (docs/KERNELS.md, section 10).
DEFAULT_TARGET = "host-dispatch"


def _build_dir(args) -> Path:
    """--build-dir, or build/TARGET under the current directory."""
    return Path(args.build_dir or f"build/{Path(args.target).stem}")


def _program_path(graph_name: str, build_dir: Path, target) -> Path:
    """Where the SCons tool puts the program that runs a graph: host runner or test firmware."""
    folder = build_dir.resolve() / graph_name
    if target.baremetal:
        return folder / "firmware" / f"{graph_name}.elf"
    return folder / f"{graph_name}_runner"


def _scons_build(graph_path: Path, build_dir: Path, target_name: str = "host", quiet: bool = True,
                 graph=None) -> Path:
    """Build one graph for a target with the SCons tool; return the program that runs it.

    `graph` is the lowered graph when the caller has it; lowering first reports graph errors
    at the user's path before SCons runs."""
    from tinsmith.pipeline import lower
    from tinsmith.targets import load_target

    target = load_target(target_name)
    _check_compiler(target)
    if graph is None:
        graph = lower(graph_path)
    program = _program_path(graph.name, build_dir, target)
    if Path(target_name).suffix in (".yaml", ".yml"):
        target_name = str(Path(target_name).resolve())
    toolpath = scons_toolpath()
    build_dir = build_dir.resolve()
    build_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "SCons", "-Q", "-f", str(toolpath / "tinsmith" / "single_graph.scons"),
           f"toolpath={toolpath}", f"graph={graph_path.resolve()}", f"build_dir={build_dir}",
           f"target={target_name}", str(program)]
    # SCons runs where the user does, so paths in messages and comments read as theirs do.
    if limits.settings():  # the generate step SCons runs applies the same limits
        cmd.insert(-1, f"limits={limits.settings()}")
    proc = subprocess.run(cmd, capture_output=quiet, text=True)
    if proc.returncode != 0:
        detail = (proc.stdout + proc.stderr).strip() if quiet else ""
        raise TinsmithError(None, f"building {graph_path} for {target.name} failed" + (":" if detail else ""),
                            detail=detail or None)
    return program


# How to install the cross compilers of the built-in targets, by toolchain prefix.
_COMPILER_HINTS = {
    "arm-none-eabi": "on Debian or Ubuntu: apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi "
                     "libstdc++-arm-none-eabi-newlib (or Arm's GNU toolchain from developer.arm.com), then put it on PATH",
    "riscv64-unknown-elf": "on Debian or Ubuntu: apt-get install gcc-riscv64-unknown-elf picolibc-riscv64-unknown-elf",
}


def _check_compiler(target) -> None:
    """A missing cross compiler is named, with how to install it, before SCons fails on it."""
    import shutil
    tools = target.toolchain
    compiler = tools.command("cxx")
    found = shutil.which(compiler, path=str(tools.path) if tools.path else None)
    if found is None:
        hint = next((h for prefix, h in _COMPILER_HINTS.items() if tools.prefix.startswith(prefix)),
                    "install it or set the target file's toolchain")
        raise TinsmithError(None, f"the compiler for target '{target.name}', {compiler}, is not on PATH", hint)


def _read_inputs(graph, path: Path, aliases: dict[str, str] | None = None) -> dict[str, np.ndarray]:
    """The arrays of an .npz by graph input name; `aliases` maps a model's original tensor names
    (which an .npz may use instead) to the identifiers they became."""
    import numpy as np
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {(aliases or {}).get(k, k): archive[k] for k in archive.files}
    except (OSError, ValueError) as e:
        raise TinsmithError(None, f"cannot read inputs from {path}: {e}") from None
    missing = [n for n in graph.api_inputs if n not in arrays]
    if missing:
        raise TinsmithError(None, f"{path} lacks input{'s' * (len(missing) > 1)} {', '.join(missing)}",
                            f"its arrays must be named after the graph inputs: {', '.join(graph.api_inputs)}")
    result = {}
    for name in graph.api_inputs:
        t = graph.types[name]
        a = arrays[name]
        if tuple(a.shape) != t.shape:
            raise TinsmithError(None, f"input '{name}' in {path} has shape {list(a.shape)}, "
                                f"the graph expects {list(t.shape)}")
        problem = _conversion_problem(a, t)
        if problem:
            raise TinsmithError(None, f"input '{name}' in {path} {problem}", _quantize_hint(t))
        result[name] = np.ascontiguousarray(a, dtype=t.numpy_dtype)
    return result


def _conversion_problem(a: np.ndarray, t) -> str | None:
    """Why array `a` cannot become the input of type `t` without changing its values, or None:
    an integer or bool input takes integers (or bools) in its range, never floats."""
    import numpy as np
    want = t.numpy_dtype
    if want.kind not in "biu" or a.dtype == want:
        return None
    if a.dtype.kind not in "biu":
        return f"is {a.dtype}, the graph expects {t.dtype}"
    low, high = (0, 1) if want.kind == "b" else (np.iinfo(want).min, np.iinfo(want).max)
    if a.size and (a.min() < low or a.max() > high):
        return f"holds values from {a.min()} to {a.max()}, outside the range of {t.dtype} ({low} to {high})"
    return None


def _quantize_hint(t) -> str | None:
    if t.quant is None:
        return None
    return (f"the input is quantized: pass q = round(x / {t.quant.scale[0]:.9g}) + {t.quant.zero_point[0]}, "
            f"clipped to the range of {t.dtype}")


def _input_bytes(graph, inputs: dict[str, np.ndarray]) -> bytes:
    """Inputs as the runners read them: raw little-endian data in declaration order."""
    import numpy as np
    return b"".join(np.ascontiguousarray(inputs[n], dtype=graph.types[n].numpy_dtype)
                    .astype(graph.types[n].numpy_dtype.newbyteorder("<")).tobytes() for n in graph.api_inputs)


def _output_arrays(graph, data: bytes) -> dict[str, np.ndarray]:
    import numpy as np
    outputs, offset = {}, 0
    for name in graph.api_outputs:
        t = graph.types[name]
        outputs[name] = np.frombuffer(data, dtype=t.numpy_dtype.newbyteorder("<"), count=t.size,
                                      offset=offset).reshape(t.shape).astype(t.numpy_dtype)
        offset += t.nbytes
    return outputs


def run_compiled(graph_path: Path, inputs: dict[str, np.ndarray], build_dir: Path,
                 graph=None, target_name: str = "host") -> dict[str, np.ndarray]:
    """Build (if needed) and run the compiled graph on the host or the target's emulator;
    returns its outputs."""
    from tinsmith.pipeline import lower
    from tinsmith.targets import load_target
    from tinsmith.targets.qemu import run_on_emulator

    if graph is None:
        graph = lower(graph_path)
    target = load_target(target_name)
    program = _scons_build(graph_path, build_dir, target_name, graph=graph)
    if target.baremetal:
        return _output_arrays(graph, run_on_emulator(target, program, _input_bytes(graph, inputs)).output)
    with tempfile.TemporaryDirectory() as tmp:
        in_file, out_file = Path(tmp) / "in.bin", Path(tmp) / "out.bin"
        in_file.write_bytes(_input_bytes(graph, inputs))
        proc = subprocess.run([str(program), str(in_file), str(out_file)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise TinsmithError(None, f"{program} failed" + (":" if proc.stderr.strip() else ""),
                                detail=proc.stderr.strip() or None)
        return _output_arrays(graph, out_file.read_bytes())


def seeded_inputs(graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Standard-normal inputs from a fixed seed, one array per graph input."""
    import numpy as np
    rng = np.random.default_rng(seed)

    def draw(t):
        if t.numpy_dtype.kind in "iu" and t.dtype != "int64":  # quantized data: its whole range
            info = np.iinfo(t.numpy_dtype)
            return rng.integers(info.min, info.max, t.shape, endpoint=True).astype(t.numpy_dtype)
        return rng.standard_normal(t.shape).astype(t.numpy_dtype)
    return {n: draw(graph.types[n]) for n in graph.api_inputs}


def cmd_generate(args) -> int:
    from tinsmith.load import graph_dependencies
    if args.print_name:  # what build tools name the outputs after, before generating them
        from tinsmith.load import graph_name
        print(graph_name(args.graph))
        return 0
    from tinsmith.pipeline import compile_graph, library_files, write_files
    compiled = compile_graph(args.graph, constants_in_ram=args.constants_in_ram, target=args.target,
                             constants_section=args.constants_section, threads=args.threads)
    files = library_files(compiled.files, compiled.graph.name) if args.library_only else compiled.files
    inputs = [args.graph, *graph_dependencies(args.graph)] if args.depfile else []
    write_files(files, args.out_dir, stamp=args.stamp, depfile=args.depfile, inputs=inputs)
    return 0


def cmd_include_dir(args) -> int:
    from tinsmith.paths import BAREMETAL_DIR, RUNTIME_INCLUDE, scons_toolpath
    if args.cmake:  # TinsmithConfig.cmake ships inside the SCons tool's package
        print(scons_toolpath() / "tinsmith" / "cmake")
    elif args.platformio:
        print(scons_toolpath() / "tinsmith" / "platformio")
    else:
        print(BAREMETAL_DIR if args.baremetal else RUNTIME_INCLUDE)
    return 0


def cmd_memory_script(args) -> int:
    from tinsmith.files import write_if_changed
    from tinsmith.targets import load_target
    from tinsmith.targets.firmware import memory_script
    write_if_changed(Path(args.output), memory_script(load_target(args.target)).encode("utf-8"))
    return 0


def cmd_verify(args) -> int:
    from tinsmith.build_steps import verify_step
    from tinsmith.verify import VerifyError
    try:
        verify_step(Path(args.report), [Path(p) for p in args.include], Path(args.stamp) if args.stamp else None)
    except VerifyError as e:
        print(e, file=sys.stderr)
        return 1
    return 0


def cmd_report(args) -> int:
    from tinsmith.build_steps import report_step
    from tinsmith.measure import summary
    report_step(Path(args.plan), Path(args.object), args.target, Path(args.output),
                Path(args.html) if args.html else None, Path(args.firmware) if args.firmware else None,
                args.ram_budget, args.flash_budget, show=None if args.quiet else lambda r: print(summary(r)))
    return 0


def cmd_emulate(args) -> int:
    import json

    import numpy as np

    from tinsmith.measure.smoke import read_outputs, smoke_bytes
    from tinsmith.targets import load_target
    from tinsmith.targets.qemu import run_on_emulator
    report = json.loads(Path(args.report).read_text(encoding="utf-8"))
    # The host runner's smoke pattern in each input's element type, so host and target runs compare.
    run = run_on_emulator(load_target(args.target), Path(args.firmware), smoke_bytes(report["inputs"]))
    try:
        outputs = read_outputs(report["outputs"], run.output)
    except ValueError as e:
        raise TinsmithError(None, f"{args.firmware}: {e}") from None
    for v, values in zip(report["outputs"], outputs):
        if not values.size:  # (the host runner prints no summary of an empty output either)
            continue
        print(f"{report['graph']} [{args.target}]: {v['name']}[{'x'.join(map(str, v['shape']))}] "
              f"sum={float(values.astype(np.float64).sum()):.6g} first={float(values.reshape(-1)[0]):.6g}")
    counted = f", {run.instructions:,} instructions" if run.instructions is not None else ""
    print(f"{report['graph']} [{args.target}]: call used {run.stack_bytes} bytes of stack{counted}")
    return 0


def cmd_build(args) -> int:
    program = _scons_build(Path(args.graph), _build_dir(args), args.target, quiet=False)
    print(f"built {one_line(str(program))}")
    if args.instructions:
        print(_measure_instructions(Path(args.graph), _build_dir(args), args.target, program))
    return 0


def _measure_instructions(graph_path: Path, build_dir: Path, target_name: str, program: Path) -> str:
    """Run the built firmware, and the firmware with the kernel hook, on the emulator; write the
    instructions into NAME.json and NAME.html; return the summary line."""
    import json

    from tinsmith.escape import json_text
    from tinsmith.measure import summary
    from tinsmith.measure.emulated import build_kernel_hook_firmware, with_instructions
    from tinsmith.measure.page import write_page
    from tinsmith.pipeline import lower
    from tinsmith.targets import load_target
    from tinsmith.targets.qemu import kernel_instructions, run_on_emulator
    target = load_target(target_name)
    if not target.baremetal or target.emulator is None:
        raise TinsmithError(None, f"--instructions counts instructions on an emulated core; target "
                            f"'{target.name}' has no emulator", "use --target cortex-m4 (or another target with a board)")
    graph = lower(graph_path)
    data = _input_bytes(graph, seeded_inputs(graph, 0))
    total = run_on_emulator(target, program, data).instructions
    if Path(target_name).suffix in (".yaml", ".yml"):
        target_name = str(Path(target_name).resolve())
    hooked = build_kernel_hook_firmware(build_dir / graph.name, graph.name, target_name)
    counts = kernel_instructions(target, run_on_emulator(target, hooked, data))
    path = build_dir.resolve() / graph.name / f"{graph.name}.json"
    report = with_instructions(json.loads(path.read_text(encoding="utf-8")), total, counts,
                               f"{Path(target.emulator.command[0]).name} -icount",
                               "seeded standard-normal inputs (seed 0)")
    path.write_text(json_text(report), encoding="utf-8")
    write_page(report, path.with_suffix(".html"))
    return summary(report)


def cmd_run(args) -> int:
    import numpy as np
    from tinsmith.pipeline import lower
    from tinsmith.load import original_names
    graph = lower(args.graph)
    inputs = _read_inputs(graph, Path(args.inputs), original_names(args.graph))
    outputs = run_compiled(Path(args.graph), inputs, _build_dir(args), graph, args.target)
    # keyed as the model names them: an output named `and` became the identifier `and_`
    original = {ident: name for name, ident in original_names(args.graph).items()}
    outputs = {original.get(name, name): value for name, value in outputs.items()}
    try:
        with open(args.output, "wb") as f:  # a file object: np.savez would append .npz to a name
            np.savez(f, **outputs)
    except OSError as e:
        raise TinsmithError(None, f"cannot write outputs to {args.output}: {e.strerror}") from None
    return 0


def cmd_check(args) -> int:
    from tinsmith.pipeline import lower
    graph = lower(args.graph)
    inputs = seeded_inputs(graph, args.seed)
    if args.per_layer:  # each node alone, then the whole graph as it is compiled (fused, planned)
        layers = _check_per_layer(args, graph, inputs)
        print(f"end to end ({graph.name} as compiled, fusion and memory plan included):")
        whole = _check_outputs(args, graph, inputs)
        if whole and not layers:
            print("note: every node is within its tolerance on the inputs the compiled code gave it, but the "
                  "outputs are not: small differences grow through the graph (it is ill-conditioned on these "
                  "inputs), or fusion or the memory plan changed a result", file=sys.stderr)
        return max(layers, whole)
    return _check_outputs(args, graph, inputs)


def _check_outputs(args, graph, inputs) -> int:
    import numpy as np
    from tinsmith.reference import evaluate
    from tinsmith.tolerance import summation_lengths, within_tolerance
    got = run_compiled(Path(args.graph), inputs, _build_dir(args), graph, args.target)
    want = evaluate(graph, inputs)
    lengths = summation_lengths(graph)
    failed = []
    for name in graph.api_outputs:
        g, w = got[name].astype(np.float64), want[name].astype(np.float64)
        diff = np.abs(g - w)
        ok, ratio = within_tolerance(got[name], want[name], lengths[name], args.rtol, args.atol)
        print(f"{name}: max abs diff {float(diff.max()) if diff.size else 0.0:.3g}, "
              f"{ratio:.3g} of the tolerance (summation length {lengths[name]})")
        if not ok:
            failed.append(name)
    if failed:
        print(f"error: {', '.join(failed)} differ{'s' * (len(failed) == 1)} from the NumPy reference by more "
              f"than the tolerance (see `check --help`)", file=sys.stderr)
        if not args.per_layer:
            print("hint: `check --per-layer` names the first node whose compiled output differs", file=sys.stderr)
        return 1
    return 0


def _check_per_layer(args, graph, inputs) -> int:
    from tinsmith.per_layer import run_per_layer
    results = run_per_layer(graph, inputs, _build_dir(args) / "per-layer",
                            lambda path, xs, folder: run_compiled(path, xs, folder, None, args.target),
                            args.rtol, args.atol)
    width = max((len(r.node.name) for r in results), default=4)
    for r in results:
        print(f"{'ok  ' if r.ok else 'FAIL'} {r.node.name:<{width}} {r.node.op:<18} max abs diff {r.max_abs_diff:.3g}, "
              f"{r.ratio:.3g} of the tolerance (reduction length {r.length})")
    bad = next((r for r in results if not r.ok), None)
    if bad is None:
        print(f"every node of {graph.name} matches its NumPy reference on the inputs it read")
        return 0
    where = f"{bad.node.loc}: " if bad.node.loc else ""
    print(f"{where}error: node '{one_line(bad.node.name)}' ({bad.node.op}) is the first whose output differs from its "
          f"NumPy reference on the same inputs: max abs diff {bad.max_abs_diff:.3g}, {bad.ratio:.3g} times "
          f"the tolerance", file=sys.stderr)
    return 1


def cmd_validate(args) -> int:
    import json

    from tinsmith.escape import json_text
    from tinsmith.load import original_names
    from tinsmith.pipeline import lower
    from tinsmith.targets import load_target
    from tinsmith.validate import ValidateError, print_validation, read_samples, validate
    model = Path(args.graph)
    reference = Path(args.reference) if args.reference else model
    if args.reference is None and model.suffix not in (".onnx", ".tflite"):
        raise ValidateError(None, f"{model} is a graph file: validate needs the original model to compare with",
                            "pass --reference MODEL.onnx or MODEL.tflite (the model it was imported from)")
    graph = lower(model)
    names = {ident: original for original, ident in original_names(model).items()}
    aliases = original_names(model)
    if args.data:
        samples = read_samples(graph, Path(args.data), aliases)
        source = f"{len(samples)} sample{'s' * (len(samples) != 1)} from {one_line(args.data)}"
    else:
        samples = [seeded_inputs(graph, args.seed + k) for k in range(args.samples)]
        source = f"{args.samples} seeded random input{'s' * (args.samples != 1)} (seed {args.seed})"
    target = load_target(args.target)
    build_dir = _build_dir(args)
    result = validate(model, reference, graph, samples, target.name,
                      lambda path, inputs, folder: run_compiled(path, inputs, folder, None, args.target),
                      build_dir, args.per_layer, args.rtol, args.min_cosine, names, source)
    print_validation(result, graph.name, sys.stdout)
    report = build_dir.resolve() / graph.name / f"{graph.name}.json"
    if report.is_file():  # the build's report carries the latest validation of what it describes
        data = json.loads(report.read_text(encoding="utf-8"))
        data["validation"] = result.as_json()
        report.write_text(json_text(data), encoding="utf-8")
    if args.json:
        Path(args.json).write_text(json_text(result.as_json()), encoding="utf-8")
    if result.ok:
        print(f"{graph.name} [{target.name}] agrees with {result.runtime} within the tolerance")
        return 0
    bad = [m.name for m in result.outputs + result.layers if not m.ok]
    print(f"error: {graph.name} [{target.name}] differs from {result.runtime} beyond the tolerance in "
          f"{', '.join(bad[:5])}{' and more' if len(bad) > 5 else ''} (see `validate --help`)", file=sys.stderr)
    return 1


def cmd_show(args) -> int:
    import json

    from tinsmith.measure.page import kernels, write_page
    from tinsmith.pipeline import compile_graph
    c = compile_graph(args.graph, target=args.target)
    g = c.graph
    plan = json.loads(c.files[f"{g.name}.plan.json"])
    figures = {m.name: (m.macs, m.params) for k in kernels(plan) for m in k.members}
    print(f"graph {g.name} ({one_line(g.source)})")
    for n in g.inputs:
        print(f"  input  {n}: {g.types[n]}")
    for n in g.outputs:
        print(f"  output {n}: {g.types[n]}")
    for name, const in g.constants.items():
        print(f"  const  {name}: {const.type} from {one_line(const.source)}")
    print("nodes (schedule order):")
    fused_into = c.schedule.fused_into()
    for node, cluster in zip(c.schedule.nodes, c.schedule.clusters):
        attrs = ", ".join(f"{k}={v}" for k, v in node.attrs.items() if v is not None)
        print(f"  [{cluster}] {node.name}: {node.op}({', '.join(node.inputs)}) -> "
              f"{', '.join(node.outputs)}: {', '.join(str(g.types[o]) for o in node.outputs)}"
              + (f"  {{{attrs}}}" if attrs else "")
              + "".join(f"  {label} {n:,}" for label, n in zip(("MACs", "params"), figures.get(node.name, ())) if n)
              + (f"  (fused into the kernel of {fused_into[node.name]})" if node.name in fused_into else ""))
    print(f"total: {plan.get('macs', 0):,} MACs, {plan.get('params', 0):,} parameters")
    print(f"clusters: {c.schedule.cluster_count}")
    print(f"memory plan: workspace {c.plan.workspace_bytes} bytes "
          f"(lower bound {c.plan.lower_bound_bytes})")
    for p in c.plan.placements:
        print(f"  {p.lifetime.value}: offset {p.offset}, {p.lifetime.nbytes} bytes, "
              f"clusters {p.lifetime.first}..{p.lifetime.last}")
    if args.html is not None:
        page = write_page(plan, args.html or f"{g.name}.html")
        print(f"wrote {one_line(str(page))}")
        if not args.no_open:
            import webbrowser
            try:
                opened = webbrowser.open(page.resolve().as_uri())
            except webbrowser.Error:
                opened = False
            if not opened:
                print(f"no web browser could be opened here: open {one_line(str(page.resolve()))} in one")
    return 0


def cmd_arena(args) -> int:
    from tinsmith.arena import arena_summary, write_arena
    report = write_arena(args.sources, args.out_dir, args.name, args.target)
    if not args.quiet:
        print(arena_summary(report, args.target_label or report.get("target")))
    return 0


def cmd_import_onnx(args) -> int:
    from tinsmith.load.write_yaml import import_onnx
    for path in import_onnx(args.model, args.output, args.batch):
        print(f"wrote {one_line(str(path))}")
    return 0


def cmd_import(args) -> int:
    from tinsmith.load.write_yaml import import_model
    for path in import_model(args.model, args.output, args.batch):
        print(f"wrote {one_line(str(path))}")
    return 0


def cmd_ops(args) -> int:
    from tinsmith.builders import BUILDERS
    from tinsmith.ops import PRIMITIVES
    import shutil
    width = shutil.get_terminal_size((100, 24)).columns
    for title, names in ((f"primitives ({len(PRIMITIVES)}, ONNX semantics)", sorted(PRIMITIVES)),
                         (f"builders ({len(BUILDERS)}, composites of primitives)", sorted(BUILDERS))):
        print(f"{title}:")
        cell = max(map(len, names)) + 2
        per_row = max((width - 2) // cell, 1)
        for i in range(0, len(names), per_row):
            print("  " + "".join(n.ljust(cell) for n in names[i:i + per_row]).rstrip())
    return 0


def _version() -> str:
    """The installed distribution's version (a checkout installed editable has one too)."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("tinsmith")
    except PackageNotFoundError:
        return "unknown (not installed: pip install the checkout)"


class _VersionAction(argparse.Action):
    """--version, reading the installed distribution's version only when asked: importing
    importlib.metadata costs every command about 30 ms of CPU, a tenth of `generate` on a small
    graph, which build tools run once per graph."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0,
                         help=help or "show program's version number and exit")

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"tinsmith {_version()}")  # on stdout, as argparse's own version action prints it
        parser.exit()


def _doc(name: str) -> str:
    """Where a document the help cites is: docs/NAME in a checkout, or the copy a wheel installs
    inside the package (codegen/docs/NAME)."""
    package = Path(__file__).resolve().parent
    for folder in (package.parent / "docs", package / "docs"):
        if (folder / name).is_file():
            return str(folder / name)
    return f"docs/{name} in Tinsmith's source"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tinsmith", description="Compile neural-network graphs to C++.")
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", required=True)

    def add_target(p):
        p.add_argument("--target", default=DEFAULT_TARGET,
                       help=f"{DEFAULT_TARGET} (default), host, cortex-m4, cortex-m7, ..., or a target YAML file")
        p.add_argument("--build-dir", help="where to build [build/TARGET]")

    def command(name, fn, help, graph=True, description=None, graph_help="graph YAML file"):
        p = sub.add_parser(name, help=help, description=description or help)
        if graph:
            p.add_argument("graph", help=graph_help)
        if graph or name == "import-onnx":
            p.add_argument("--limits", default="", metavar="NAME=N,...",
                           help="raise or lower the limits on what a model may ask for "
                           f"({', '.join(Limits.names())}); see {_doc('SECURITY.md')}")
        p.set_defaults(fn=fn)
        return p

    p = command("build", cmd_build, "build the graph's library and runner for the host")
    p.add_argument("--instructions", action="store_true",
                   help="on a target with an emulator: run the firmware on it and add the instructions one call "
                   "executes, in total and per layer, to NAME.json, NAME.html and the summary line")
    add_target(p)
    p = command("run", cmd_run, "run the compiled graph on inputs from an .npz file")
    p.add_argument("--inputs", required=True, help=".npz with one array per graph input")
    p.add_argument("--output", required=True, help=".npz to write, one array per graph output")
    add_target(p)
    p = command("check", cmd_check, "compare compiled outputs with the NumPy reference",
                description="Run the compiled graph and the NumPy reference on the same seeded inputs. "
                "Both compute in float32 but sum in different orders, so an output element passes when "
                "|compiled - reference| <= (rtol + n * eps) * max(|reference|, mean |reference|) + atol, "
                "where eps = 2**-23 (float32) and n is the output's summation length: the reduction "
                "lengths (dot product, window, reduced elements) of every node it depends on, summed. "
                "The mean magnitude of the output stands in where an element nearly cancels to zero.")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--per-layer", action="store_true",
                   help="build the graph with every node's output exposed (in BUILD_DIR/per-layer), check each "
                   "node against its NumPy reference on the inputs the compiled code gave it (n: that node's "
                   "own reduction length), and name the first node that differs; then check the outputs end to end as without "
                   "--per-layer (small differences can grow through a graph that every node passes alone)")
    p.add_argument("--rtol", type=float, default=1e-5, help="relative tolerance besides n * eps [1e-5]")
    p.add_argument("--atol", type=float, default=1e-6, help="absolute tolerance [1e-6]")
    add_target(p)
    p = command("validate", cmd_validate, "compare the compiled model with the original model in its own runtime",
                description="Run the original model in its own runtime (ONNX Runtime for .onnx, the TFLite Micro "
                "interpreter for .tflite; install them with the test extra) and the compiled model (on the host, or "
                "on the target's emulator) on the same inputs, and print per output the max and mean absolute "
                "error, RMSE, cosine similarity and top-1 agreement (the share of samples whose largest element is "
                "at the same place). An output fails when its max absolute error exceeds RTOL times the "
                "reference's largest magnitude (or one quantization step of an int8 tensor, where larger), or its "
                "cosine similarity is below MIN_COSINE; then the exit status is 1. The metrics also go into the "
                "build's NAME.json report (key 'validation') and, with --json, into a file of their own.",
                graph_help="the model to compile: an .onnx or .tflite file (compared with itself), or a graph "
                "YAML file with --reference")
    p.add_argument("--reference", help="the original .onnx or .tflite model, when GRAPH is a graph YAML imported from "
                   "it (or another file to compare with) [GRAPH itself]")
    p.add_argument("--data", help="the inputs: a folder of .npz files (one sample each, arrays named after the "
                   "inputs) or .npy files (one-input models), or one .npz holding a batch (one more, leading "
                   "dimension) [seeded random inputs]")
    p.add_argument("--samples", type=int, default=4, help="how many random inputs without --data [4]")
    p.add_argument("--seed", type=int, default=0, help="seed of the first random input [0]")
    p.add_argument("--per-layer", action="store_true", help="also compare every intermediate value both sides "
                   "compute (the original runtime's intermediate tensors; the compiled model built again with every "
                   "value exposed, in BUILD_DIR/validate)")
    p.add_argument("--rtol", type=float, default=1e-3,
                   help="allowed max absolute error, relative to the reference's largest magnitude [1e-3]")
    p.add_argument("--min-cosine", type=float, default=0.999, help="smallest cosine similarity that passes [0.999]")
    p.add_argument("--json", metavar="FILE", help="also write the metrics to FILE")
    add_target(p)
    p = command("report", cmd_report, "measure the compiled model and write the report (used by the SCons tool)",
                graph=False)
    p.add_argument("plan", help="NAME.plan.json written by the generator")
    p.add_argument("object", help="the model's object file, compiled with -fstack-usage")
    p.add_argument("firmware", nargs="?", help="linked firmware, to bound the stack of library calls")
    p.add_argument("-o", "--output", required=True, help="NAME.json to write")
    p.add_argument("--html", help="NAME.html to write: the report as a self-contained page (graph, "
                   "workspace over time, layers)")
    p.add_argument("--target", default="host")
    p.add_argument("--ram-budget", type=int, help="fail if the model needs more RAM (bytes)")
    p.add_argument("--flash-budget", type=int, help="fail if the model needs more flash (bytes)")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="do not print the summary line (the SCons tool prints it from NAME.json)")
    p = command("emulate", cmd_emulate, "run test firmware once on the target's emulator", graph=False)
    p.add_argument("firmware", help="the ELF built by the SCons tool")
    p.add_argument("--report", required=True, help="the graph's NAME.plan.json or NAME.json")
    p.add_argument("--target", required=True)
    p = command("show", cmd_show, "print the expanded graph, clusters and memory plan, with each node's MACs and "
                "parameters")
    p.add_argument("--target", default=DEFAULT_TARGET,
                   help=f"the target whose kernels, fusion and plan to show [{DEFAULT_TARGET}]")
    p.add_argument("--html", nargs="?", const="", metavar="PAGE",
                   help="also write the report page of the plan (to PAGE, or NAME.html here) and open it in a browser")
    p.add_argument("--no-open", action="store_true", help="with --html: write the page, do not open it")
    command("ops", cmd_ops, "list supported primitives and builders", graph=False)
    p = command("import-onnx", cmd_import_onnx, "import an ONNX model as a graph YAML file and its "
                "weights (.npz beside it)", graph=False)
    p.add_argument("model", help="the .onnx file")
    p.add_argument("-o", "--output", required=True, help="graph file to write, e.g. graphs/NAME.yaml")
    p.add_argument("--batch", type=int, default=1, help="size for a symbolic batch dimension [1]")
    p = command("import", cmd_import, "import an ONNX or TFLite model (by its suffix) as a graph YAML file and "
                "its weights (.npz beside it)", graph=False)
    p.add_argument("model", help="the .onnx or .tflite file")
    p.add_argument("-o", "--output", required=True, help="graph file to write, e.g. graphs/NAME.yaml")
    p.add_argument("--batch", type=int, default=1, help="size for a symbolic batch dimension of an ONNX model [1]")
    p = command("generate", cmd_generate, "write the generated sources (for the SCons tool, Make, CMake, ...)")
    p.add_argument("-o", "--out-dir", required=True)
    p.add_argument("--target", default=DEFAULT_TARGET,
                   help=f"target whose kernels to generate: a built-in target or a target file [{DEFAULT_TARGET}]")
    p.add_argument("--constants-in-ram", action="store_true",
                   help="let the startup code copy constants to RAM instead of reading them from flash")
    p.add_argument("--constants-section", metavar="SECTION",
                   help="declare the constants in this linker section (e.g. .ext_weights) where the build "
                   "defines TINSMITH_PLACE_SECTIONS; the SCons tool passes the target's placement")
    p.add_argument("--threads", type=int, metavar="N",
                   help="threads call() may run on (host targets; NAME_set_threads() chooses fewer at run time) "
                   "[the target's: 1]")
    p.add_argument("--print-name", action="store_true",
                   help="print the graph's name (the stem of the files it would write) and write nothing")
    p.add_argument("--library-only", action="store_true",
                   help="write only what a library compiles (NAME.cpp, NAME.hpp, NAME.h): no host runner, no plan")
    p.add_argument("--stamp", help="file written on every run, even when no output changed, for build "
                   "tools to depend on (outputs keep their timestamps unless their bytes change)")
    p.add_argument("--depfile", help="Make-syntax rule naming the graph and the weight files it reads as "
                   "prerequisites of the stamp, for Make's include and CMake's DEPFILE; without --stamp, "
                   "the depfile is its own stamp")
    p = command("arena", cmd_arena, "plan models that never run at the same time into one shared workspace: "
                "write ARENA.h (the buffer and how to pass it to each model) and ARENA.arena.json (the saving)",
                graph=False)
    p.add_argument("sources", nargs="+", help="one arena file (arena: NAME, graphs: [FILE, ...]), or the "
                   "models' NAME.plan.json or NAME.json reports with --name")
    p.add_argument("-o", "--out-dir", required=True, help="folder to write ARENA.h and ARENA.arena.json into")
    p.add_argument("--name", help="the arena's name (an identifier), when made from reports")
    p.add_argument("--target", help="the target the models are built for, whose kernels decide their "
                   "workspaces: host-dispatch (the default for an arena file), host, cortex-m4, ..., or a target YAML file; "
                   "with reports, the target they name")
    p.add_argument("--target-label", help=argparse.SUPPRESS)  # shown in the summary line
    p.add_argument("-q", "--quiet", action="store_true", help="do not print the summary line")
    p = command("include-dir", cmd_include_dir, "print the folder to add to the include path of code that "
                "includes NAME.hpp (it holds tinsmith/buffer.hpp)", graph=False)
    p.add_argument("--baremetal", action="store_true", help="print the folder of the bare-metal test "
                   "runtime instead (startup.c, semihost.c/.h, measure.c/.h, sections.ld)")
    p.add_argument("--cmake", action="store_true", help="print the folder of TinsmithConfig.cmake instead "
                   "(for find_package(Tinsmith) with -DTinsmith_DIR=...)")
    p.add_argument("--platformio", action="store_true", help="print the folder of the PlatformIO extra "
                   "script instead (tinsmith_model.py)")
    p = command("memory-script", cmd_memory_script, "write the linker script with a bare-metal target's "
                "memory map; it INCLUDEs sections.ld, so link with -L$(tinsmith include-dir --baremetal)",
                graph=False)
    p.add_argument("--target", required=True, help="cortex-m4, cortex-m7, cortex-m0plus, or a target YAML file")
    p.add_argument("-o", "--output", required=True, help="linker script to write, e.g. build/memory.ld")
    p = command("verify", cmd_verify, "check generated headers with libclang (used by the SCons tool)",
                graph=False)
    p.add_argument("report", help="NAME.json next to the generated headers")
    p.add_argument("--stamp", help="file to write when verification passes")
    p.add_argument("-I", "--include", action="append", default=[], help="extra include directory")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        chosen = limits.parse(getattr(args, "limits", "") or "")
    except limits.LimitsError as e:
        parser.error(str(e))
    try:
        with limits.using(chosen):
            return args.fn(args)
    except TinsmithError as e:
        from tinsmith.load.onnx_model import located
        print(located(e), file=sys.stderr)  # a place in an ONNX model as path:1:1; one line (errors.py)
        return 1
