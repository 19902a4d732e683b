"""Measure the generator: CPU seconds of `compile_graph` (load, expand, schedule, generate, plan,
render, check the plan, assemble; no C++ compiler) for every graph in graphs/ and every int8
model in models/, per target, in one process.

    python benchmarks/generate.py [--targets host-dispatch cortex-m4 ...] [--rounds 3]
    python benchmarks/generate.py --write docs/BENCHMARKS.md   # ... into its generator section

CPU time of this process (time.process_time), not wall time, so that other jobs on the machine
change the figures little; each figure is the smallest of `rounds` runs (the generator's work is
deterministic: the spread is noise). The first round of the first target pays Python's imports
and the template cache; a warm-up compile before the measurement keeps that out of the table.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tinsmith.pipeline import compile_graph  # noqa: E402

MODELS = sorted((ROOT / "graphs").glob("*.yaml")) + sorted((ROOT / "models").glob("*_int8.tflite"))
TARGETS = ("host", "host-dispatch", "cortex-m4", "cortex-m55", "rv32imac")
SECTION = "## Build: the generator's CPU time"
BEFORE = "## Cortex-M4: int8 models against TFLite Micro with CMSIS-NN"  # the section goes before this one


def cpu_seconds(model: Path, target: str, rounds: int) -> float:
    best = None
    for _ in range(rounds):
        start = time.process_time()
        compile_graph(model, target=target)
        spent = time.process_time() - start
        best = spent if best is None else min(best, spent)
    return best


def table(targets: list[str], rounds: int) -> str:
    compile_graph(MODELS[0], target=targets[0])  # imports and templates, outside the figures
    rows = {m.stem: [cpu_seconds(m, t, rounds) for t in targets] for m in MODELS}
    lines = ["| model | " + " | ".join(targets) + " |", "|---|" + "---:|" * len(targets)]
    lines += [f"| {name} | " + " | ".join(f"{s:.2f}" for s in seconds) + " |" for name, seconds in rows.items()]
    totals = [sum(seconds[k] for seconds in rows.values()) for k in range(len(targets))]
    lines.append("| **all** | " + " | ".join(f"**{s:.1f}**" for s in totals) + " |")
    return "\n".join(lines)


def write_section(doc: Path, body: str, rounds: int) -> None:
    text = doc.read_text()
    section = (f"{SECTION}\n\nWritten by `python benchmarks/generate.py --write docs/BENCHMARKS.md`: CPU seconds "
               "of the generator (`compile_graph`: every stage up to the generated files, no C++ compiler) per "
               f"model and target, in one process, the smallest of {rounds} runs. host-dispatch generates each "
               "of its three ISA levels from one lowered graph.\n\n" + body + "\n\n")
    if SECTION in text:
        start = text.index(SECTION)
        end = text.find("\n## ", start + len(SECTION))
        text = text[:start] + section + (text[end + 1:] if end != -1 else "")
    else:
        at = text.index(BEFORE)
        text = text[:at] + section + text[at:]
    doc.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", nargs="+", default=list(TARGETS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--write", type=Path, help="put the table into this markdown file")
    args = parser.parse_args()
    body = table(args.targets, args.rounds)
    print(body)
    if args.write:
        write_section(args.write, body, args.rounds)


if __name__ == "__main__":
    main()
