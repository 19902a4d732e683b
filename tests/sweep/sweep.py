"""The sweep as one call: enumerate, generate, compile, run; a process pool does the work."""
from __future__ import annotations

import functools
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from tests.sweep.combos import Combo, all_combos
from tests.sweep.probes import PROBES
from tests.sweep import run

DEFAULT_FINDINGS = Path(__file__).with_name("findings.txt")


@dataclass
class Outcome:
    targets: list[str]
    combos: int = 0          # combinations tried
    accepted: int = 0        # combinations the definitions accept
    not_accepted: int = 0    # refused by shape/type inference (or the loader): skipped
    swept: set[tuple[str, str]] = field(default_factory=set)  # (probe, element types) tried
    results: list[run.Result] = field(default_factory=list)


def _worker_init() -> None:
    """Run below the other work on the machine, and parse each target file once per worker rather
    than once per compile (two thirds of the pipeline's time on these one-node graphs)."""
    os.nice(10)
    import tinsmith.targets
    tinsmith.targets.load_target = functools.lru_cache(maxsize=None)(tinsmith.targets.load_target)


def _generate(args) -> tuple[str, bool, list[run.Result], dict]:
    combo, work, targets, run_host = args
    accepted, results, meta = run.generate(combo, work, targets, run_host)
    return combo.name, accepted, results, meta


def _compile(args) -> list[run.Result]:
    return run.compile_batch(*args)


def select(ops: Sequence[str] = (), sample: int = 0) -> list[Combo]:
    """The combinations to try: all, or those of `ops`, or every `sample`-th (deterministic)."""
    combos = all_combos(PROBES)
    if ops:
        unknown = set(ops) - {p.op for p in PROBES}
        if unknown:
            raise SystemExit(f"no probe for: {', '.join(sorted(unknown))}")
        combos = [c for c in combos if c.probe.op in ops]
    return combos[::sample] if sample > 1 else combos


def sweep(targets: Sequence[str], ops: Sequence[str] = (), jobs: int = 2, run_host: bool = True,
          sample: int = 0, work: Path = Path("/tmp/tinsmith-sweep"), combos: Sequence[Combo] | None = None,
          progress: Callable[[str], None] = lambda m: None) -> Outcome:
    """Every selected combination x every target: results of everything that is not skipped."""
    run.clean(work)
    combos = list(combos) if combos is not None else select(ops, sample)
    by_name = {c.name: c for c in combos}
    out = Outcome(list(targets), combos=len(combos), swept={(c.probe.key, c.label) for c in combos})
    generated: dict[str, list[str]] = {t: [] for t in targets}
    metas: dict[str, dict] = {}
    with ProcessPoolExecutor(max_workers=jobs, initializer=_worker_init) as pool:
        tasks = [(c, work, list(targets), run_host and run.HOST in targets) for c in combos]
        for name, accepted, results, meta in pool.map(_generate, tasks, chunksize=8):
            if not accepted:
                out.not_accepted += 1
                out.results += results
                continue
            out.accepted += 1
            out.results += [r for r in results if r.outcome != run.FOLDED]
            stopped = {r.target for r in results if r.outcome != run.FOLDED}
            for t in targets:
                if t not in stopped:
                    generated[t].append(name)
            if meta:
                metas[name] = meta
        progress(f"generated: {out.accepted} of {out.combos} combinations accepted, "
                 f"{sum(map(len, generated.values()))} files to compile")
        batches = []
        for t, names in generated.items():
            for i in range(0, len(names), run.BATCH):
                chunk = names[i:i + run.BATCH]
                runnable = t == run.HOST and run_host
                batches.append((t, chunk, work, [metas[n] for n in chunk] if runnable else None,
                                {n: by_name[n] for n in chunk}))
        batches.sort(key=lambda b: b[3] is None)  # host batches (compile and run) first
        for k, results in enumerate(pool.map(_compile, batches)):
            out.results += results
            if k % 20 == 19:
                progress(f"compiled {k + 1} of {len(batches)} batches")
    return out
