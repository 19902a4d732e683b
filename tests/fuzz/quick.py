"""Cheap cases in bulk: hostile and random graph files, ONNX and TFLite models loaded and lowered
inside one worker process, about a hundred cases per CPU second.

The worker (`python -m tests.fuzz.quick WORKDIR SEED FIRST COUNT`) makes case FIRST .. FIRST+COUNT-1
(each from its own seed, so any case can be made again), writes the file into WORKDIR/current,
then loads and lowers it as `tinsmith generate` would (a share of the TFLite cases are models whose
operators lie field by field, tflite_operators.py, drawn so that every other case stays as it
was). What must hold, as for the slow cases (tests/fuzz/harness.py): the file is accepted, or
refused with `path:line:col: error:` lines; no other exception (a traceback), no warning (the
command line would print it), no case longer than TIMEOUT seconds (a hang), none that needs more
than MEMORY bytes (a memory blow-up), no crash. A share of the accepted graphs is also generated
(up to the C++ text, the plan check included). Every finding is kept as a reproducer folder
WORKDIR/findings/FORMAT-INDEX holding the file and `finding.txt` (what happened, and the command
that shows it again). The parent (`run_quick`) restarts a worker that died and counts its case as a
finding (a crash, or the memory limit).
"""
from __future__ import annotations

import json
import os
import random
import resource
import shutil
import signal
import struct
import subprocess
import sys
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import harness

FORMATS = ("yaml", "onnx", "tflite")
TIMEOUT = int(harness.TIMEOUT)  # seconds for one case in the worker (a generated graph: 16 s at load 15)
MEMORY = 4 << 30  # bytes of address space a worker may use
GENERATE_SHARE = 0.01  # accepted graphs that are also generated (the plan check included)
OPERATOR_SHARE = 0.4  # TFLite cases whose operators lie field by field, not by damaged bytes
TFLITE_SEEDS = sorted((harness.ROOT / "tests" / "data" / "tflite").glob("*.tflite")) + \
    [harness.ROOT / "models" / "ad_autoencoder_int8.tflite"]
BUILTIN = {"logistic": 14, "tanh": 28}
# shipped graphs that most YAML cases start from: small files, so a case costs milliseconds (the
# MLPerf Tiny graphs are the seed of one case in ten)
QUICK_GRAPHS = ("mlp", "branches", "gru_kws", "encoder", "transformer_block")
# 32-bit values a hostile flatbuffer puts where an offset, a length, an index or a shape belongs
HOSTILE_WORDS = [0, 1, 0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, 0x10000, 4, 8, 0xFFFF, 3, 255]


def case_rng(seed: int, index: int) -> random.Random:
    """The random source of case `index` of campaign `seed` (the same on every machine)."""
    return random.Random(f"{seed}:{index}")


def format_of(seed: int, index: int) -> str:
    return FORMATS[case_rng(seed, index).randrange(len(FORMATS))]


def random_tflite(rng: random.Random) -> tuple[bytes, np.ndarray]:
    """A valid random int8 model (LOGISTIC or TANH, random shape and input quantization, TFLite's
    output quantization) and an int8 input for it."""
    from tinsmith.quant.activations import OUTPUT_QUANT
    if str(harness.ROOT / "tests") not in sys.path:
        sys.path.insert(0, str(harness.ROOT / "tests"))  # (tests/tflite_writer.py)
    from tflite_writer import single_operator
    function = rng.choice(sorted(BUILTIN))
    shape = [1] + [rng.randint(1, 7) for _ in range(rng.randint(1, 3))]
    quant = (float(10.0 ** rng.uniform(-3.5, 0.5)), rng.randint(-128, 127))
    model = single_operator(BUILTIN[function], "int8", shape, quant, OUTPUT_QUANT[function])
    x = np.random.default_rng(rng.randrange(1 << 30)).integers(-128, 128, shape, dtype=np.int8)
    return model, x


def mutate_flatbuffer(rng: random.Random, data: bytes) -> bytes:
    """Damage to a flatbuffer: hostile 32-bit words at aligned places (offsets, lengths, indices,
    dimensions), flipped bytes, cut or repeated stretches."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        action = rng.randrange(5)
        if action <= 1 and len(out) >= 8:
            at = rng.randrange(0, len(out) - 4) & ~3
            word = rng.choice(HOSTILE_WORDS + [len(out), len(out) - at, rng.randrange(1 << 32)])
            out[at:at + 4] = struct.pack("<I", word)
        elif action == 2 and out:
            out[rng.randrange(len(out))] = rng.randrange(256)
        elif action == 3:
            del out[rng.randrange(len(out) + 1):]
        elif out:
            a = rng.randrange(len(out))
            b = min(len(out), a + rng.randint(1, 64))
            out[a:a] = out[a:b]
    return bytes(out)


def operator_case(seed: int, index: int) -> bool:
    """Whether TFLite case `index` is a model with hostile operators (tflite_operators.py) instead
    of make_case's: drawn from a source of its own, so make_case makes every earlier case again."""
    return random.Random(f"{seed}:{index}:operators").random() < OPERATOR_SHARE


def make_case(fmt: str, rng: random.Random, folder: Path, operators: bool = False) -> tuple[Path, str]:
    """Write one case of format `fmt` into `folder`; returns the file and 'valid', 'malformed' or
    (TFLite, with `operators`) 'operators'."""
    from . import campaign, models, mutate
    if fmt == "tflite" and operators:
        from .tflite_operators import hostile_operator_model
        path = folder / "model.tflite"
        path.write_bytes(hostile_operator_model(rng))
        return path, "operators"
    if fmt == "yaml":
        args = campaign.yaml_case(rng, folder, QUICK_GRAPHS, campaign.SMALL + campaign.LARGE)
        return Path(args[1]), "malformed"
    if fmt == "onnx":
        model, _ = models.random_model(rng)
        path = folder / "model.onnx"
        valid = rng.random() < 0.2
        path.write_bytes(model.SerializeToString() if valid else mutate.mutate_onnx(rng, model))
        return path, "valid" if valid else "malformed"
    path = folder / "model.tflite"
    if rng.random() < 0.5:
        data = random_tflite(rng)[0]
    else:
        data = rng.choice(TFLITE_SEEDS).read_bytes()
    valid = rng.random() < 0.15
    path.write_bytes(data if valid else mutate_flatbuffer(rng, data))
    return path, "valid" if valid else "malformed"


class _Hang(Exception):
    pass


def _on_alarm(signum, frame):
    raise _Hang()


def judge(path: Path, generate: bool, refuse_is_finding: bool = False) -> tuple[bool, list[str]]:
    """Load and lower `path` (and generate it when `generate`) in this process; (accepted, findings).
    A located refusal is a finding only with `refuse_is_finding` (a valid model)."""
    from tinsmith.errors import TinsmithError
    from tinsmith.load.onnx_model import located
    from tinsmith.pipeline import compile_graph, lower
    signal.alarm(TIMEOUT)
    try:
        with warnings.catch_warnings(record=True) as caught:  # (the command line prints them on stderr)
            warnings.simplefilter("always")
            lower(path)
            if generate:
                compile_graph(path)
        return True, [f"warning on stderr: {w.category.__name__}: {str(w.message)[:200]} at {w.filename}:{w.lineno}"
                      for w in caught[:1]]
    except TinsmithError as e:
        message = str(located(e))
        return False, harness.check_messages(1, message) or ([f"refused: {message[:300]}"] if refuse_is_finding else [])
    except _Hang:
        return False, [f"hang: no answer within {TIMEOUT} s"]
    except MemoryError:
        return False, ["memory blow-up: MemoryError"]
    except RecursionError:
        return False, ["traceback: RecursionError"]
    except Exception as e:  # noqa: BLE001  (any other exception is what the campaign looks for)
        where = traceback.extract_tb(e.__traceback__)[-1]
        return False, [f"traceback: {type(e).__name__}: {str(e)[:200]} at {where.filename}:{where.lineno}"]
    finally:
        signal.alarm(0)


def keep_finding(workdir: Path, fmt: str, index: int, folder: Path, path: Path, findings: list[str]) -> Path:
    """Copy the case into WORKDIR/findings/FORMAT-INDEX with a note saying how to see it again."""
    target = workdir / "findings" / f"{fmt}-{index:07d}"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(folder, target, symlinks=True, ignore=shutil.ignore_patterns("out"))
    (target / "finding.txt").write_text(
        "\n".join(findings) + f"\n\nreproduce: cd {target} && python -m tinsmith generate {path.name} -o out\n",
        encoding="utf-8", errors="backslashreplace")
    return target


def worker(workdir: Path, seed: int, first: int, count: int) -> None:
    """Run cases first .. first+count-1; one JSON line per case on stdout ('begin' before each)."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))
    signal.signal(signal.SIGALRM, _on_alarm)
    sys.setrecursionlimit(10000)
    current = workdir / "current"
    for index in range(first, first + count):
        fmt = format_of(seed, index)
        rng = case_rng(seed, index)
        rng.random()  # (the draw that chose the format)
        shutil.rmtree(current, ignore_errors=True)
        current.mkdir(parents=True)
        try:
            path, kind = make_case(fmt, rng, current, operators=operator_case(seed, index))
        except Exception as e:  # noqa: BLE001  (the case generator's own failure is not a finding)
            print(json.dumps({"index": index, "format": fmt, "skipped": repr(e)[:200]}), flush=True)
            continue
        print(json.dumps({"begin": index, "format": fmt, "kind": kind}), flush=True)
        accepted, findings = judge(path, rng.random() < GENERATE_SHARE, refuse_is_finding=kind == "valid")
        if findings:
            keep_finding(workdir, fmt, index, current, path, findings)
        print(json.dumps({"index": index, "format": fmt, "kind": kind, "accepted": accepted,
                          "findings": findings}), flush=True)


@dataclass
class QuickReport:
    """Counts per format and kind, accepted files, and findings."""

    counts: dict[str, int] = field(default_factory=dict)
    accepted: int = 0
    skipped: int = 0
    findings: list[str] = field(default_factory=list)

    @property
    def cases(self) -> int:
        return sum(self.counts.values())


def run_quick(seed: int, workdir: Path, first: int, count: int, report: QuickReport, chunk: int = 500) -> None:
    """Cases first .. first+count-1 in worker processes of `chunk` cases; a worker that dies is
    restarted after the case it died on, which is kept as a finding."""
    index, end = first, first + count
    while index < end:
        n = min(chunk, end - index)
        try:
            proc = subprocess.run([sys.executable, "-m", "tests.fuzz.quick", str(workdir), str(seed), str(index),
                                   str(n)], cwd=harness.ROOT, env=harness._env(), capture_output=True, text=True,
                                  timeout=TIMEOUT * n + 600)
            stdout, stderr, status = proc.stdout, proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as e:  # stuck where the alarm cannot interrupt it (native code)
            stdout = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            stderr, status = "hang: the worker was stopped", -9
        last_begin, done = None, index
        for line in stdout.splitlines():
            event = json.loads(line)
            if "begin" in event:
                last_begin = event
                continue
            done = event["index"] + 1
            if "skipped" in event:
                report.skipped += 1
                continue
            key = f"{event['format']} {event['kind']}"
            report.counts[key] = report.counts.get(key, 0) + 1
            report.accepted += event["accepted"]
            report.findings += [f"{event['format']}-{event['index']:07d}: {f}" for f in event["findings"]]
        if status != 0 and last_begin is not None and last_begin["begin"] >= done:
            died = last_begin["begin"]
            fmt = last_begin["format"]
            why = f"crash: the worker ended with status {status} ({stderr.strip()[-300:]})"
            current = workdir / "current"
            files = [p for p in current.iterdir() if p.name.startswith("model")] if current.exists() else []
            keep_finding(workdir, fmt, died, current, files[0] if files else current, [why])
            key = f"{fmt} {last_begin['kind']}"
            report.counts[key] = report.counts.get(key, 0) + 1
            report.findings.append(f"{fmt}-{died:07d}: {why}")
            done = died + 1
        elif status != 0:
            raise RuntimeError(f"the fuzz worker failed before its first case: {stderr[-2000:]}")
        index = done


if __name__ == "__main__":
    worker(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
