"""The pipeline runs each stage once, in one direction: a compile selects the functors and builds the
loop IR of its kernels once (`tinsmith.generate.generate`), each kernel once, and the memory planner
reads their access order without generating again. Calls are counted with a profiler hook, which
changes nothing it watches."""
from __future__ import annotations

import ast
import sys
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import pytest

import tinsmith.generate as generation
from tinsmith.pipeline import compile_graph

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def calls_of(*functions):
    """Count the calls of `functions` (and keep the arguments of each call) while the block runs."""
    codes = {f.__code__: f.__name__ for f in functions}
    counted: Counter = Counter()
    arguments: list[tuple[str, dict]] = []

    def hook(frame, event, arg):
        if event == "call" and frame.f_code in codes:
            counted[codes[frame.f_code]] += 1
            arguments.append((codes[frame.f_code], dict(frame.f_locals)))
    previous = sys.getprofile()
    sys.setprofile(hook)
    try:
        yield counted, arguments
    finally:
        sys.setprofile(previous)


@pytest.mark.parametrize("graph, target", [("graphs/kws_dscnn.yaml", "cortex-m4"),  # in-place variants
                                           ("graphs/ic_resnet8.yaml", "cortex-m4")])  # and a row pipeline
def test_a_compile_generates_its_kernels_once(graph, target):
    with calls_of(generation.generate, generation._build_kernel, generation.render_model) as (counted, arguments):
        compiled = compile_graph(ROOT / graph, target=target)
    assert counted["generate"] == 1 and counted["render_model"] == 1
    built = [(a["scheduled"].name, a["member_names"], a["variant"]) for name, a in arguments if name == "_build_kernel"]
    assert len(built) == len(set(built))  # no kernel built twice
    # every kernel rendered was built, plus the alternatives the plan did not take
    assert len(built) >= len(compiled.model.kernels)
    if "ic_resnet8" in graph:
        assert "row_pipeline" in dict(compiled.plan.variants).values()
        assert any(variant == "row_pipeline" for _, _, variant in built)


STAGE_MODULES = ["codegen/pipeline.py", "codegen/generate/__init__.py", "codegen/plan.py", "codegen/planners"]
MAX_FUNCTION_LINES = 60


def test_the_stages_functions_are_short():
    """Each function of the pipeline, generation entry, memory plan and planners does one job."""
    files = [p for m in STAGE_MODULES for p in ([ROOT / m] if m.endswith(".py") else sorted((ROOT / m).glob("*.py")))]
    long = [f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for path in files for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert long == []
