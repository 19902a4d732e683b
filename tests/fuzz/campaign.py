"""A seeded, time-bounded fuzz campaign: hostile graph files, weight files and ONNX models, plus
random valid models compiled and compared with ONNX Runtime."""
from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import yaml

from . import harness, models, mutate

GRAPHS = harness.ROOT / "graphs"
SMALL = ("mlp", "branches", "encoder", "ad_autoencoder", "kws_dscnn")  # quick to generate and compile
LARGE = ("ic_resnet8", "vww_mobilenet")


@dataclass
class Report:
    """What a campaign ran and found."""

    seed: int
    cases: int = 0
    generated: int = 0
    differential: int = 0
    seconds: float = 0.0
    kinds: dict[str, int] = field(default_factory=dict)
    findings: list[str] = field(default_factory=list)

    def summary(self) -> str:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.kinds.items()))
        lines = [f"fuzz seed {self.seed}: {self.cases} cases ({kinds}) in {self.seconds:.0f} s; "
                 f"{self.generated} generated and compiled, {self.differential} models compared with "
                 f"ONNX Runtime or TFLite Micro; {len(self.findings)} findings"]
        return "\n".join(lines + [f"  {f}" for f in self.findings])


def _load_yaml(text: str):
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # (LibYAML: fast)


def _dump_yaml(doc, **options) -> str:
    return yaml.dump(doc, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), **options)


def _copy_graph(name: str, folder: Path) -> str:
    """Copy a shipped graph and the weight files it reads into `folder`; return its text."""
    text = (GRAPHS / f"{name}.yaml").read_text(encoding="utf-8")
    doc = _load_yaml(text)
    for spec in (doc.get("constants") or {}).values():
        if isinstance(spec, dict) and isinstance(spec.get("file"), str):
            target = folder / spec["file"]
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(GRAPHS / spec["file"], target)
    return text


def _npz_arrays(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as archive:
        return {k: archive[k] for k in archive.files}


def yaml_case(rng: random.Random, folder: Path, small: tuple[str, ...] = SMALL,
              large: tuple[str, ...] = LARGE) -> list[str]:
    """A mutated shipped graph file (or its weights); returns the command line."""
    name = rng.choice(small) if rng.random() < 0.9 else rng.choice(large)
    text = _copy_graph(name, folder)
    graph = folder / "model.yaml"
    action = rng.random()
    if action < 0.2:
        doc = _load_yaml(text)
        for _ in range(rng.randint(1, 3)):
            doc = mutate.nudge_tree(rng, doc)
        text = _dump_yaml(doc, sort_keys=False, default_flow_style=None)
    elif action < 0.45:
        doc = mutate.mutate_tree(rng, _load_yaml(text))
        for _ in range(rng.choice([0, 0, 1, 2])):
            doc = mutate.mutate_tree(rng, doc)
        text = _dump_yaml(doc, sort_keys=False, default_flow_style=None, allow_unicode=True)
    elif action < 0.8:
        for _ in range(rng.randint(1, 3)):
            text = mutate.mutate_text(rng, text)
    elif action < 0.95:
        weights = sorted(p for p in folder.rglob("*.npz"))
        if weights:
            victim = rng.choice(weights)
            victim.write_bytes(mutate.mutate_npz(rng, _npz_arrays(victim)))
    else:
        text = mutate.bomb_graph(rng.randint(5, 12))
    graph.write_text(text, encoding="utf-8", errors="surrogatepass")
    return ["generate", str(graph), "-o", "out"]


def special_file_case(rng: random.Random, folder: Path) -> list[str]:
    """A graph whose weight file is a FIFO, a device or a link to one."""
    kind = rng.choice(["fifo", "zero", "dir", "graph_fifo"])
    graph = folder / "model.yaml"
    weight = folder / "w.npy"
    if kind in ("fifo", "graph_fifo"):
        os.mkfifo(weight if kind == "fifo" else folder / "g.yaml")
    elif kind == "zero":
        weight.symlink_to("/dev/zero")
    else:
        weight.mkdir()
    graph.write_text("graph: special\ninputs: {x: {dtype: float32, shape: [1, 4]}}\noutputs: [y]\n"
                     "constants:\n  w: {file: w.npy}\nnodes:\n  - {op: Add, inputs: [x, w], outputs: [y]}\n")
    return ["generate", str(folder / "g.yaml" if kind == "graph_fifo" else graph), "-o", "out"]


def onnx_case(rng: random.Random, folder: Path) -> list[str]:
    """A mutated small model: compiled directly, or imported."""
    model, _ = models.random_model(rng)
    path = folder / "model.onnx"
    if rng.random() < 0.15:  # valid, but older: the checker and the version converter on real work
        model.opset_import[0].version = rng.choice([11, 13, 17])
        path.write_bytes(model.SerializeToString())
    else:
        path.write_bytes(mutate.mutate_onnx(rng, model))
    if rng.random() < 0.5:
        return ["generate", str(path), "-o", "out"]
    args = ["import-onnx", str(path), "-o", "out/model.yaml"]
    if rng.random() < 0.2:
        args += ["--batch", str(rng.choice([0, -1, 1, 2, 2**31]))]
    return args


CASES = (("yaml", yaml_case, 0.55), ("onnx", onnx_case, 0.4), ("special", special_file_case, 0.05))


def differential_batch(rng: random.Random, folder: Path, count: int) -> tuple[int, list[str]]:
    """`count` random valid models built by one SCons run and compared with ONNX Runtime."""
    entries = []
    for i in range(count):
        model, inputs = models.random_model(rng)
        path = folder / f"rand{i}.onnx"
        onnx.save(model, str(path))
        entries.append((path, model, inputs))
    build = folder / "out"
    proc = subprocess.run([sys.executable, "-m", "SCons", "-Q", "-k", "-j2", "-C", str(harness.ROOT),
                           f"graphs={','.join(str(p) for p, _, _ in entries)}", f"build_dir={build}"]
                          + [str(build / p.stem / f"{p.stem}_runner") for p, _, _ in entries],
                          capture_output=True, text=True, env=harness._env(), timeout=900)
    findings = []
    for path, model, inputs in entries:
        runner = build / path.stem / f"{path.stem}_runner"
        if not runner.exists():
            log = "\n".join(line for line in (proc.stdout + proc.stderr).splitlines() if path.stem in line
                            or "error" in line)
            findings.append(f"differential {path.name}: valid model did not build: {log[-400:]}")
            shutil.copyfile(path, folder.parent / f"finding_{folder.name}_{path.name}")
            continue
        try:
            want = models.onnxruntime_outputs(model, inputs)[0]
        except Exception as e:  # noqa: BLE001  (a model the oracle refuses tells nothing about Tinsmith)
            findings.append(f"differential {path.name}: the generator made a model ONNX Runtime refuses: "
                            f"{str(e).splitlines()[0][:200]}")
            continue
        (folder / "in.bin").write_bytes(inputs["x"].astype("<f4").tobytes())
        run = subprocess.run([str(runner), str(folder / "in.bin"), str(folder / "out.bin")],
                             capture_output=True, text=True, timeout=60)
        if run.returncode != 0:
            findings.append(f"differential {path.name}: runner failed: {run.stderr[:200]}")
            continue
        got = np.frombuffer((folder / "out.bin").read_bytes(), "<f4").reshape(want.shape)
        length = models.summation_length(model)
        with np.errstate(over="ignore", invalid="ignore"):  # (outputs near float32's largest)
            magnitude = np.abs(want.astype(np.float64))
            allowed = (1e-5 + length * 2.0 ** -23) * np.maximum(magnitude, np.mean(magnitude)) + 1e-6
            diff = np.where(got == want, 0.0, np.abs(got.astype(np.float64) - want))
            worst = float(np.max(diff / allowed)) if want.size else 0.0
        if not worst <= 1.0:
            findings.append(f"differential {path.name}: differs from ONNX Runtime by {worst:.3g} x the tolerance")
            shutil.copyfile(path, folder.parent / f"finding_{folder.name}_{path.name}")
    return count, findings


def run_campaign(seed: int, workdir: Path, *, seconds: float | None = None, cases: int = 0,
                 differential: int = 0, differential_share: float = 0.3, log=None) -> Report:
    """Run a campaign from `seed`; cases that find something are kept in `workdir`.

    Either for `seconds` (a long campaign: about `differential_share` of the time goes to the
    differential part), or until `cases` hostile cases and `differential` models compared with
    ONNX Runtime have run: the suite's campaign, whose cases are the same on a fast machine and a
    loaded one."""
    report = Report(seed)
    rng = random.Random(seed)
    start = time.monotonic()
    spent_differential = 0.0
    index = 0

    def more() -> bool:
        if seconds is not None:
            return time.monotonic() - start < seconds
        return report.cases < cases or report.differential < differential

    def differential_next() -> bool:
        if seconds is not None:
            elapsed = time.monotonic() - start
            return spent_differential < differential_share * max(elapsed, 1.0) and index > 1
        # By count: one batch after every third hostile case while models are still owed.
        return report.differential < differential and (report.cases >= cases or index % 4 == 0)

    while more():
        index += 1
        folder = workdir / f"case{index:05d}"
        folder.mkdir(parents=True)
        if differential_next():
            t0 = time.monotonic()
            count, findings = differential_batch(rng, folder, 4)
            spent_differential += time.monotonic() - t0
            report.differential += count
            report.findings += findings
            report.kinds["differential"] = report.kinds.get("differential", 0) + count
            if not findings:
                shutil.rmtree(folder, ignore_errors=True)
            continue
        kinds = [k for k in CASES]
        kind, make, _ = rng.choices(kinds, weights=[w for _, _, w in kinds])[0]
        case_seed = rng.randrange(1 << 30)
        try:
            args = make(random.Random(case_seed), folder)
        except Exception as e:  # noqa: BLE001  (the generator's own failure is not a finding)
            shutil.rmtree(folder, ignore_errors=True)
            if log:
                log(f"case generator failed ({kind}): {e!r}")
            continue
        outcome = harness.run_case(f"{kind}:{case_seed}", folder, args)
        report.cases += 1
        report.kinds[kind] = report.kinds.get(kind, 0) + 1
        report.generated += outcome.generated
        if outcome.findings:
            for f in outcome.findings:
                report.findings.append(f"{folder.name} ({kind}, seed {case_seed}, {' '.join(args)}): {f}")
            if log:
                log(report.findings[-1])
        else:
            shutil.rmtree(folder, ignore_errors=True)
    report.seconds = time.monotonic() - start
    return report


def tflite_case(rng: random.Random, folder: Path) -> list[str]:
    """A hostile or valid TFLite model, generated by the command line."""
    from .quick import make_case
    path, _ = make_case("tflite", rng, folder)
    return ["generate", str(path), "-o", "out"]


# the compiled cases of `run_inputs`: each goes through `tinsmith generate`, g++ and libclang
COMPILED = (("yaml", yaml_case, 0.4), ("onnx", onnx_case, 0.3), ("tflite", tflite_case, 0.25),
            ("special", special_file_case, 0.05))


def tflite_differential(rng: random.Random, folder: Path) -> list[str]:
    """One random valid int8 model compiled, run and compared bit for bit with the TFLite Micro interpreter."""
    from tflite_micro.python.tflite_micro import runtime as tflm

    from tinsmith.cli import run_compiled
    from tinsmith.pipeline import lower
    from .quick import random_tflite
    model, x = random_tflite(rng)
    path = folder / "rand.tflite"
    path.write_bytes(model)
    graph = lower(path)
    got = run_compiled(path, {graph.inputs[0]: x}, folder / "build", graph)[graph.outputs[0]]
    interp = tflm.Interpreter.from_bytes(model)
    interp.set_input(x, 0)
    interp.invoke()
    want = interp.get_output(0)
    if got.shape != want.shape or not np.array_equal(got, want):
        shutil.copyfile(path, folder.parent / f"finding_{folder.name}_{path.name}")
        return [f"differential {folder.name}/{path.name}: differs from TFLite Micro in "
                f"{int(np.sum(got.reshape(want.shape) != want)) if got.size == want.size else 'shape'} elements"]
    return []


def run_inputs(seed: int, workdir: Path, *, inputs: int | None = None, seconds: float | None = None,
               compiled_every: int = 200, differential_every: int = 5000, onnx_models: int = 4,
               log=None) -> Report:
    """A campaign of `inputs` cases (or of `seconds`) over graph files, ONNX and TFLite models.

    Most cases are loaded and lowered in bulk (tests/fuzz/quick.py). After every `compiled_every`
    of them one case goes through the command line, g++ and libclang (harness.run_case), and
    once per `differential_every` cases `onnx_models` random ONNX models are compared with ONNX
    Runtime and one random int8 TFLite model with the TFLite Micro interpreter. Every case counts
    as one input. Compiled cases run the command line forked from this process (harness.FORK)."""
    fork, harness.FORK = harness.FORK, True
    try:
        return _run_inputs(seed, workdir, inputs, seconds, compiled_every, differential_every, onnx_models, log)
    finally:
        harness.FORK = fork


def _run_inputs(seed, workdir, inputs, seconds, compiled_every, differential_every, onnx_models, log) -> Report:
    from .quick import QuickReport, run_quick
    report, quick = Report(seed), QuickReport()
    slow: dict[str, int] = {}  # compiled and differential cases per kind
    findings: list[str] = []
    start = time.monotonic()
    rng = random.Random(seed)
    index, next_differential = 0, differential_every

    def total() -> int:
        return quick.cases + sum(slow.values())

    def more() -> bool:
        if seconds is not None and time.monotonic() - start >= seconds:
            return False
        return inputs is None or total() < inputs

    while more():
        block = max(1, compiled_every - 1)
        if inputs is not None:
            block = min(block, inputs - total())
        run_quick(seed, workdir, index, block, quick)
        index += block + 1
        if not more():
            break
        folder = workdir / f"compiled{index:07d}"
        folder.mkdir(parents=True, exist_ok=True)
        if total() >= next_differential:
            next_differential += differential_every
            count, found = differential_batch(rng, folder, onnx_models) if onnx_models else (0, [])
            found += tflite_differential(rng, folder)
            slow["onnx differential"] = slow.get("onnx differential", 0) + count
            slow["tflite differential"] = slow.get("tflite differential", 0) + 1
            report.differential += count + 1
        else:
            kind, make, _ = rng.choices(COMPILED, weights=[w for _, _, w in COMPILED])[0]
            case_seed = rng.randrange(1 << 30)
            args = make(random.Random(case_seed), folder)
            outcome = harness.run_case(f"{kind}:{case_seed}", folder, args)
            slow[f"{kind} compiled"] = slow.get(f"{kind} compiled", 0) + 1
            report.generated += outcome.generated
            found = [f"{folder.name} ({kind}, seed {case_seed}, {' '.join(args)}): {f}" for f in outcome.findings]
        findings += found
        if not found:
            shutil.rmtree(folder, ignore_errors=True)
        if log:
            log(f"{total()} inputs, {len(quick.findings) + len(findings)} findings, "
                f"{time.monotonic() - start:.0f} s")
    report.cases = total()
    report.kinds = {**quick.counts, **slow}
    report.findings = quick.findings + findings
    report.seconds = time.monotonic() - start
    return report
