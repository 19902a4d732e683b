"""Running a compiled case: its host runner on each data set, outputs compared with the expected
ones as the ONNX backend test runner compares them (onnx/backend/test/runner:
`assert_similar_outputs`: same shape, same element type, `np.testing.assert_allclose` with the
case's rtol and atol, NaN equal to NaN), except that integer and boolean outputs must match
exactly."""
from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

RUNNER_TIMEOUT_S = 120  # a runner that takes longer is stuck: the case fails


@dataclass(frozen=True)
class Signature:
    """Element types and shapes of the compiled graph's inputs and outputs, in runner order."""

    inputs: tuple[tuple[str, np.dtype, tuple[int, ...]], ...]
    outputs: tuple[tuple[str, np.dtype, tuple[int, ...]], ...]


def _le(dtype: np.dtype) -> np.dtype:
    return np.dtype(dtype).newbyteorder("<")


def mismatch(index: int, name: str, got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> str | None:
    """Why output `index` differs from the expected one, or None if it matches."""
    what = f"output {index} ({name})"
    if got.shape != want.shape:
        return f"{what} has shape {list(got.shape)}, expected {list(want.shape)}"
    if got.dtype != want.dtype:
        return f"{what} is {got.dtype}, expected {want.dtype}"
    if want.dtype.kind == "V":  # ml_dtypes (bfloat16, float8, int4, ...): compare the values as float32
        got, want = got.astype(np.float32), want.astype(np.float32)
    if want.dtype.kind in "fc":
        close = np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    else:
        close = got == want
    if close.all():
        return None
    bad = np.argwhere(~close)
    first = tuple(int(i) for i in bad[0])
    text = (f"{what}: {len(bad)} of {want.size} elements differ, first at {list(first)}: "
            f"got {got[first]!r}, expected {want[first]!r}")
    if want.dtype.kind == "f":
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
        finite = diff[np.isfinite(diff)]
        if finite.size:
            text += f" (max abs diff {finite.max():.3g})"
    return text


def run_data_set(runner: Callable[..., list[str]], signature: Signature, inputs: Sequence[np.ndarray],
                 expected: Sequence[np.ndarray], rtol: float, atol: float, scratch: Path) -> str | None:
    """Run the runner on one data set (`runner(IN, OUT)` is its command line); None if every
    output matches, else the first reason."""
    if len(inputs) != len(signature.inputs):
        return f"the compiled graph has {len(signature.inputs)} inputs, the data set {len(inputs)}"
    if len(expected) != len(signature.outputs):
        return f"the compiled graph has {len(signature.outputs)} outputs, the test expects {len(expected)}"
    data = []
    for (name, dtype, shape), array in zip(signature.inputs, inputs):
        if tuple(array.shape) != shape:
            return f"input '{name}' has shape {list(array.shape)}, the compiled graph expects {list(shape)}"
        data.append(np.ascontiguousarray(array, dtype=_le(dtype)).tobytes())
    in_file, out_file = scratch.with_suffix(".in"), scratch.with_suffix(".out")
    in_file.write_bytes(b"".join(data))
    out_file.unlink(missing_ok=True)
    try:
        proc = subprocess.run(runner(str(in_file), str(out_file)), capture_output=True,
                              timeout=RUNNER_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return f"the runner did not finish in {RUNNER_TIMEOUT_S} s"
    if proc.returncode != 0:
        detail = proc.stderr.decode(errors="replace").strip().splitlines()
        return f"the runner exited {proc.returncode}" + (f": {detail[0]}" if detail else "")
    raw, offset = out_file.read_bytes(), 0
    size = sum(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
               for _, dtype, shape in signature.outputs)
    if size != len(raw):
        return f"the runner wrote {len(raw)} bytes, expected {size}"
    for index, ((name, dtype, shape), want) in enumerate(zip(signature.outputs, expected)):
        count = int(np.prod(shape, dtype=np.int64))
        got = np.frombuffer(raw, dtype=_le(dtype), count=count, offset=offset).reshape(shape)
        offset += count * np.dtype(dtype).itemsize
        reason = mismatch(index, name, got.astype(dtype), want, rtol, atol)
        if reason:
            return reason
    return None
