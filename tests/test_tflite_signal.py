"""TFLite Micro's signal-library custom operators (the micro-speech audio front end), on models
written by tests/tflite_writer.py with FlexBuffers options, compiled and compared with the TFLite
Micro interpreter, which registers these operators and is the oracle: every output equal, bit for
bit. Each operator alone on the host (edge cases: silent frames, -32768 samples, inputs near 2^32
and 2^64); spectral subtraction's noise estimate carried over several calls, as the interpreter
carries it over several invokes; the whole front end (window, auto scale, FFT, energy, filter bank,
square root, spectral subtraction, PCAN, log) with micro speech's parameters frame after frame on
the host and one frame on the emulated Cortex-M4; and the importer's errors on bad options and on
the signal operators it does not compile."""
from __future__ import annotations

import math
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import emulated_core
from tflite_writer import Op, Tensor, model

tflm = pytest.importorskip("tflite_micro.python.tflite_micro.runtime")
ROOT = Path(__file__).resolve().parents[1]


def custom(code: str, inputs, outputs, **options) -> Op:
    return Op("CUSTOM", inputs, outputs, custom=code, custom_options=options)


def oracle_frames(data: bytes, frames: list[list[np.ndarray]], outputs: int) -> list[list[np.ndarray]]:
    """The interpreter's outputs for each frame, one interpreter invoked frame after frame."""
    interp = tflm.Interpreter.from_bytes(data, arena_size=1 << 20)
    result = []
    for inputs in frames:
        for i, x in enumerate(inputs):
            interp.set_input(x, i)
        interp.invoke()
        result.append([interp.get_output(k).copy() for k in range(outputs)])
    return result


def compiled(tmp_path: Path, name: str, data: bytes, inputs: list[np.ndarray], target: str = "host",
             library: bool = True):
    """The model's outputs through `tinsmith run`'s path, which leaves the library that run_frames
    links in build_TARGET/; without `library`, on the host without SCons (tests/host_program.py)."""
    from host_program import run_on_host
    from tinsmith.cli import run_compiled
    from tinsmith.pipeline import lower
    path = tmp_path / f"{name}.tflite"
    path.write_bytes(data)
    graph = lower(path)
    feeds, build = dict(zip(graph.inputs, inputs)), tmp_path / f"build_{target}"
    got = (run_compiled(path, feeds, build, graph, target) if library or target != "host"
           else run_on_host(path, feeds, build, graph))
    return [got[o] for o in graph.outputs]


RNG = np.random.default_rng(7)


def _window():
    w = (np.hanning(16) * 32767).astype(np.int16)
    x = RNG.integers(-32768, 32768, (3, 16)).astype(np.int16)
    return model([Tensor("x", "int16", [3, 16]), Tensor("w", "int16", [16], data=w), Tensor("y", "int16", [3, 16])],
                 [custom("SignalWindow", [0, 1], [2], shift=12)], [0], [2]), [x]


def _auto_scale(x):
    def make():
        return model([Tensor("x", "int16", [64]), Tensor("y", "int16", [64]), Tensor("scale", "int32", [])],
                     [custom("SignalFftAutoScale", [0], [1, 2])], [0], [1, 2]), [x]
    return make


TFLITE_TYPES = {"float32": 0, "int32": 2, "int16": 7}


def _rfft(length: int, frame: int, dtype: str = "int16"):
    def make():
        if dtype == "float32":
            x = RNG.normal(0, 1000, (2, frame)).astype(np.float32)
        else:
            x = RNG.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, (2, frame), endpoint=True).astype(dtype)
        return model([Tensor("x", dtype, [2, frame]), Tensor("y", dtype, [2, length + 2])],
                     [custom("SignalRfft", [0], [1], T=TFLITE_TYPES[dtype], fft_length=length)], [0], [1]), [x]
    return make


def _energy():
    x = RNG.integers(-32768, 32768, 66).astype(np.int16)
    x[:2] = -32768  # the largest energy, 2^31
    return model([Tensor("x", "int16", [66]), Tensor("y", "uint32", [33])],
                 [custom("SignalEnergy", [0], [1], end_index=33, start_index=0)], [0], [1]), [x]


def _square_root():
    v = np.concatenate([RNG.integers(0, 2 ** 63, 20, dtype=np.uint64), RNG.integers(0, 2 ** 32, 20, dtype=np.uint64),
                        np.array([0, 1, 2, 3, 0xFFFFFFFF, 0xFFFE0001, 0xFFFF0000, 2 ** 64 - 1, 2 ** 32], np.uint64)])
    return model([Tensor("x", "uint64", [len(v)]), Tensor("s", "int32", [], data=np.array(3, np.int32)),
                  Tensor("y", "uint32", [len(v)])], [custom("SignalFilterBankSquareRoot", [0, 1], [2])], [0], [2]), [v]


def _log():
    v = np.concatenate([RNG.integers(0, 2 ** 32, 30, dtype=np.uint64), np.arange(10),
                        [2 ** 31, 2 ** 32 - 1, 65536, 65535]]).astype(np.uint32)
    return model([Tensor("x", "uint32", [len(v)]), Tensor("y", "int16", [len(v)])],
                 [custom("SignalFilterBankLog", [0], [1], input_correction_bits=3, output_scale=1600)], [0], [1]), [v]


def _filter_bank():
    widths = np.int16([3, 4, 5, 6, 7, 8])
    starts = np.int16([1, 4, 8, 13, 19, 26])
    wstarts = np.concatenate([[0], np.cumsum(widths)[:-1]]).astype(np.int16)
    weights = RNG.integers(0, 4096, int(widths.sum())).astype(np.int16)
    tables = [weights, (4096 - weights).astype(np.int16), starts, wstarts, widths]
    x = RNG.integers(0, 2 ** 32, 40, dtype=np.uint64).astype(np.uint32)
    tensors = [Tensor("x", "uint32", [40])] + [Tensor(f"t{i}", "int16", [len(t)], data=t) for i, t in enumerate(tables)]
    return model(tensors + [Tensor("y", "uint64", [5])], [custom("SignalFilterBank", [0, 1, 2, 3, 4, 5], [6],
                                                                 num_channels=5)], [0], [6]), [x]


def _pcan():
    lut = RNG.integers(-2000, 32767, 125).astype(np.int16)
    x = RNG.integers(0, 2 ** 20, 40, dtype=np.uint64).astype(np.uint32)
    noise = np.concatenate([RNG.integers(0, 2 ** 32, 30, dtype=np.uint64), np.arange(10)]).astype(np.uint32)
    return model([Tensor("x", "uint32", [40]), Tensor("noise", "uint32", [40]), Tensor("lut", "int16", [125], data=lut),
                  Tensor("y", "uint32", [40])], [custom("SignalPCAN", [0, 1, 2], [3], snr_shift=6)], [0, 1], [3]), [x, noise]


def _irfft(length: int, dtype: str = "int16"):
    def make():
        shape = (2, length + 2)
        if dtype == "float32":
            x = RNG.normal(0, 1000, shape).astype(np.float32)
        else:
            x = RNG.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, shape, endpoint=True).astype(dtype)
        return model([Tensor("x", dtype, list(shape)), Tensor("y", dtype, [2, length])],
                     [custom("SignalIrfft", [0], [1], T=TFLITE_TYPES[dtype], fft_length=length)], [0], [1]), [x]
    return make


SINGLE = {
    "window": _window,
    "auto_scale": _auto_scale(RNG.integers(-300, 300, 64).astype(np.int16)),
    "auto_scale_int16_min": _auto_scale(np.int16([-32768, 5] * 32)),  # the library's running peak ends at 5
    "auto_scale_silence": _auto_scale(np.zeros(64, np.int16)),
    "rfft_512_of_480": _rfft(512, 480),
    "rfft_64": _rfft(64, 64),
    "rfft_32_of_20": _rfft(32, 20),
    "rfft_8": _rfft(8, 8),
    "rfft_int32_512_of_480": _rfft(512, 480, "int32"),
    "rfft_int32_32": _rfft(32, 32, "int32"),
    "rfft_float_512_of_480": _rfft(512, 480, "float32"),
    "rfft_float_8": _rfft(8, 8, "float32"),
    "irfft_512": _irfft(512),
    "irfft_8": _irfft(8),
    "irfft_int32_64": _irfft(64, "int32"),
    "irfft_float_512": _irfft(512, "float32"),
    "energy": _energy,
    "square_root": _square_root,
    "log": _log,
    "filter_bank": _filter_bank,
    "pcan": _pcan,
}


@pytest.mark.parametrize("case", sorted(SINGLE))
def test_operator_matches_tflite_micro_bit_for_bit(case, tmp_path):
    data, inputs = SINGLE[case]()
    expected, = oracle_frames(data, [inputs], 2 if case.startswith("auto_scale") else 1)
    got = compiled(tmp_path, case, data, inputs, library=False)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_array_equal(g, e)


# --- several calls: the state ------------------------------------------------------------------
def run_frames(tmp_path: Path, name: str, data: bytes, frames: list[list[np.ndarray]],
               scribble: bool = False, restart_before: int | None = None) -> list[list[np.ndarray]]:
    """The compiled model called once per frame on one workspace (initialised once), as firmware
    calls it: a small driver linked with the generated library. With `scribble`, every workspace
    byte is overwritten between calls, as another model sharing the workspace would: the state is
    not in the workspace, so the stream goes on unharmed. Before frame `restart_before` the driver
    calls reset_state(), which starts the stream over."""
    from tinsmith.pipeline import lower
    compiled(tmp_path, name, data, frames[0])  # builds the library
    graph = lower(tmp_path / f"{name}.tflite")
    build = tmp_path / "build_host" / name
    ins = [f"in_{v}" for v in graph.inputs]
    outs = [f"out_{v}" for v in graph.outputs]
    driver = "\n".join([
        "#include <cstdio>", "#include <cstring>", f'#include "{name}.hpp"',
        *[f"static {name}::Input_{v} in_{v};" for v in graph.inputs],
        *[f"static {name}::Output_{v} out_{v};" for v in graph.outputs],
        f"static {name}::Workspace ws;",
        "int main(int, char** argv) {",
        '  std::FILE* in = std::fopen(argv[1], "rb"); std::FILE* out = std::fopen(argv[2], "wb");',
        f"  {name}::init_ws(ws);",
        "  for (int frame = 0;; ++frame) {",
        *[f"    if (std::fread({v}.data, sizeof {v}.data, 1, in) != 1) return 0;" for v in ins],
        *([f"    if (frame == {restart_before}) {name}::reset_state();"] if restart_before is not None else []),
        f"    {name}::call({', '.join(ins + outs)}, ws);",
        *[f"    std::fwrite({v}.data, sizeof {v}.data, 1, out);" for v in outs],
        *(["    std::memset(ws.bytes, 0xA5, sizeof ws.bytes);"] if scribble else []),
        "  }", "}", ""])
    (tmp_path / "driver.cpp").write_text(driver)
    subprocess.run(["g++", "-std=c++17", "-Wall", "-Wextra", "-Werror", f"-I{build}", f"-I{ROOT / 'runtime_cpp/include'}",
                    str(tmp_path / "driver.cpp"), str(build / f"lib{name}.a"), "-o", str(tmp_path / "driver")], check=True)
    (tmp_path / "frames.bin").write_bytes(b"".join(x.tobytes() for f in frames for x in f))
    subprocess.run([str(tmp_path / "driver"), str(tmp_path / "frames.bin"), str(tmp_path / "out.bin")], check=True)
    raw = (tmp_path / "out.bin").read_bytes()
    types = [graph.types[v] for v in graph.outputs]
    result, offset = [], 0
    for _ in frames:
        row = []
        for t in types:
            row.append(np.frombuffer(raw, t.numpy_dtype, int(np.prod(t.shape, dtype=np.int64)), offset).reshape(t.shape))
            offset += t.nbytes
        result.append(row)
    assert offset == len(raw)
    return result


SPECTRAL_SUBTRACTION = dict(alternate_one_minus_smoothing=16384 - 983, alternate_smoothing=983, clamping=False,
                            min_signal_remaining=819, num_channels=40, one_minus_smoothing=16384 - 410,
                            smoothing=410, smoothing_bits=10, spectral_subtraction_bits=14)


@pytest.mark.parametrize("clamping", [False, True])
def test_spectral_subtraction_carries_its_noise_estimate_from_call_to_call(clamping, tmp_path):
    data = model([Tensor("x", "uint32", [40]), Tensor("y", "uint32", [40]), Tensor("noise", "uint32", [40])],
                 [custom("SignalFilterBankSpectralSubtraction", [0], [1, 2],
                         **{**SPECTRAL_SUBTRACTION, "clamping": clamping})], [0], [1, 2])
    levels = [2 ** 12, 2 ** 12, 2 ** 8, 2 ** 16, 3, 2 ** 14]  # loud and quiet frames: the estimate rises and falls
    frames = [[RNG.integers(0, level, 40, dtype=np.uint64).astype(np.uint32)] for level in levels]
    expected = oracle_frames(data, frames, 2)
    got = run_frames(tmp_path, "subtract", data, frames)
    for k, (g, e) in enumerate(zip(got, expected)):
        for a, b in zip(g, e):
            np.testing.assert_array_equal(a, b, err_msg=f"frame {k}")
    assert not np.array_equal(expected[0][1], expected[-1][1])  # the state did change


def _stream(code: str, in_shape, outs, frames: int, dtype="int16", **options):
    """A stateful operator alone, with `frames` calls' worth of seeded input."""
    tensors = [Tensor("x", dtype, list(in_shape))] + [Tensor(f"y{k}", t, list(shape)) for k, (t, shape) in enumerate(outs)]
    data = model(tensors, [custom(code, [0], list(range(1, len(outs) + 1)), **options)], [0],
                 list(range(1, len(outs) + 1)))
    if dtype == "float32":
        inputs = [[RNG.normal(0, 1000, in_shape).astype(np.float32)] for _ in range(frames)]
    else:
        inputs = [[RNG.integers(-32768, 32768, in_shape).astype(np.int16)] for _ in range(frames)]
    return data, inputs


STREAMS = {
    "delay": lambda: _stream("SignalDelay", (2, 8), [("int16", (2, 8))], 4, delay_length=3),
    "delay_longer_than_the_frame": lambda: _stream("SignalDelay", (5,), [("int16", (5,))], 4, delay_length=12),
    "framer_prefill": lambda: _stream("SignalFramer", (2, 160), [("int16", (2, 2, 200)), ("bool", ())], 4,
                                      frame_size=200, frame_step=80, prefill=True),
    "framer": lambda: _stream("SignalFramer", (160,), [("int16", (2, 200)), ("bool", ())], 5,
                              frame_size=200, frame_step=80, prefill=False),
    "stacker": lambda: _stream("SignalStacker", (4,), [("int16", (16,)), ("bool", ())], 6, num_channels=4,
                               stacker_left_context=1, stacker_right_context=2, stacker_step=1),
    "stacker_step_2": lambda: _stream("SignalStacker", (3,), [("int16", (9,)), ("bool", ())], 7, num_channels=3,
                                      stacker_left_context=2, stacker_right_context=0, stacker_step=2),
    "overlap_add": lambda: _stream("SignalOverlapAdd", (2, 3, 8), [("int16", (2, 12))], 3, T=7, frame_step=4),
    "overlap_add_float": lambda: _stream("SignalOverlapAdd", (3, 8), [("float32", (6,))], 3, "float32", T=0,
                                         frame_step=2),
}


@pytest.mark.parametrize("case", sorted(STREAMS))
def test_stream_operator_keeps_its_state_as_tflite_micro_does(case, tmp_path):
    """Call after call on one workspace against one interpreter invoked as often; outputs TFLite
    Micro leaves unwritten (frames and stacks not yet valid) are not compared."""
    data, frames = STREAMS[case]()
    count = 2 if case.startswith(("framer", "stacker")) else 1
    expected = oracle_frames(data, frames, count)
    got = run_frames(tmp_path, case, data, frames)
    valid_seen = False
    for k, (g, e) in enumerate(zip(got, expected)):
        if count == 2:
            assert bool(g[1]) == bool(e[1]), f"frame {k}: valid"
            if not e[1]:
                continue
            valid_seen = True
        np.testing.assert_array_equal(g[0], e[0], err_msg=f"frame {k}")
    assert valid_seen or count == 1


# --- the whole front end ---------------------------------------------------------------------
SAMPLE_RATE, WINDOW, FFT, CHANNELS = 16000, 480, 512, 40
LOW_HZ, HIGH_HZ, WEIGHT_BITS = 125.0, 7500.0, 12


def _mel(hz):
    return 1127.0 * np.log1p(np.asarray(hz) / 700.0)


def filter_bank_tables():
    """Triangular mel filters over the FFT's bins in the signal library's layout: channel i's bins
    (from the previous centre to its own) are weighted into channel i and unweighted into the next;
    the first of the num_channels + 1 entries is the library's scratch channel."""
    centres_mel = np.linspace(_mel(LOW_HZ), _mel(HIGH_HZ), CHANNELS + 2)[1:]
    centres = (700.0 * np.expm1(centres_mel / 1127.0) * FFT / SAMPLE_RATE)
    start = int(math.ceil(LOW_HZ * FFT / SAMPLE_RATE))
    edges = [start] + [int(math.ceil(c)) for c in centres]
    weights, unweights, starts, wstarts, widths = [], [], [], [], []
    for i in range(CHANNELS + 1):
        lo, hi = edges[i], max(edges[i + 1], edges[i] + 1)
        bins = np.arange(lo, hi)
        left = centres[i - 1] if i else LOW_HZ * FFT / SAMPLE_RATE
        w = np.clip((bins - left) / max(centres[i] - left, 1e-9), 0, 1)
        starts.append(lo)
        wstarts.append(len(weights))
        widths.append(len(bins))
        weights += list(np.round(w * (1 << WEIGHT_BITS)).astype(int))
        unweights += list(((1 << WEIGHT_BITS) - np.round(w * (1 << WEIGHT_BITS))).astype(int))
    return [np.int16(t) for t in (weights, unweights, starts, wstarts, widths)], edges[0], edges[-1] + 1


def pcan_lut(strength=0.95, offset=80.0, gain_bits=21, correction_bits=3) -> np.ndarray:
    """A gain table in the library's layout: the gains at 0, 1, 2, then per bit length a quadratic
    (y0, a1, a2, 0) through the gains at the interval's start, middle and end."""
    def gain(x):
        return min(int((1 << gain_bits) * ((x / (1 << correction_bits)) + offset) ** -strength + 0.5), 32767)
    lut = [gain(0), gain(1), gain(2), 0]
    for interval in range(2, 33):
        x0 = 1 << (interval - 1)
        y0, y1, y2 = gain(x0), gain(x0 + (x0 >> 1)), gain(2 * x0 - 1 if interval == 32 else 2 * x0)
        a1 = 4 * (y1 - y0) - (y2 - y0)
        lut += [y0, a1, (y2 - y0) - a1, 0]
    return np.int16(lut[:125])


def front_end() -> bytes:
    """micro speech's preprocessor: int16 samples [1, 480] -> int16 features [40]."""
    hann = (0.5 - 0.5 * np.cos(2 * math.pi * (np.arange(WINDOW) + 0.5) / WINDOW)) * (1 << 12)
    tables, start, end = filter_bank_tables()
    t = [Tensor("audio", "int16", [1, WINDOW]), Tensor("hann", "int16", [WINDOW], data=np.int16(np.round(hann))),
         Tensor("windowed", "int16", [1, WINDOW]), Tensor("shape", "int32", [1], data=np.int32([WINDOW])),
         Tensor("flat", "int16", [WINDOW]), Tensor("scaled", "int16", [WINDOW]), Tensor("shift", "int32", []),
         Tensor("spectrum", "int16", [FFT + 2]), Tensor("energy", "uint32", [FFT // 2 + 1])]
    t += [Tensor(f"fb{i}", "int16", [len(a)], data=a) for i, a in enumerate(tables)]  # 9..13
    t += [Tensor("bands", "uint64", [CHANNELS]), Tensor("amplitude", "uint32", [CHANNELS]),  # 14, 15
          Tensor("denoised", "uint32", [CHANNELS]), Tensor("noise", "uint32", [CHANNELS]),  # 16, 17
          Tensor("gain_lut", "int16", [125], data=pcan_lut()), Tensor("agc", "uint32", [CHANNELS]),  # 18, 19
          Tensor("features", "int16", [CHANNELS])]  # 20
    ops = [custom("SignalWindow", [0, 1], [2], shift=12),
           Op("RESHAPE", [2, 3], [4]),
           custom("SignalFftAutoScale", [4], [5, 6]),
           custom("SignalRfft", [5], [7], T=7, fft_length=FFT),
           custom("SignalEnergy", [7], [8], end_index=end, start_index=start),
           custom("SignalFilterBank", [8, 9, 10, 11, 12, 13], [14], num_channels=CHANNELS),
           custom("SignalFilterBankSquareRoot", [14, 6], [15]),
           custom("SignalFilterBankSpectralSubtraction", [15], [16, 17], **SPECTRAL_SUBTRACTION),
           custom("SignalPCAN", [16, 17, 18], [19], snr_shift=6),
           custom("SignalFilterBankLog", [19], [20], input_correction_bits=3, output_scale=64)]
    return model(t, ops, [0], [20])


def speech_like(frames: int, seed: int) -> list[list[np.ndarray]]:
    """Frames of a chirp in noise that grows and fades: loud and quiet frames, as speech has."""
    rng = np.random.default_rng(seed)
    n = np.arange(frames * WINDOW)
    tone = np.sin(2 * math.pi * (300 + 2000 * n / len(n)) * n / SAMPLE_RATE)
    envelope = np.interp(n, [0, len(n) / 3, len(n)], [0.02, 0.9, 0.05])
    audio = np.clip((tone * envelope + rng.normal(0, 0.01, len(n))) * 32767, -32768, 32767).astype(np.int16)
    return [[audio[k * WINDOW:(k + 1) * WINDOW].reshape(1, WINDOW)] for k in range(frames)]


def test_front_end_frame_after_frame_matches_tflite_micro_on_the_host(tmp_path):
    """Eight frames, the workspace overwritten between them (shared with another model); then
    reset_state() and the first frame again, which gives the first frame's features again."""
    data = front_end()
    frames = speech_like(8, seed=3)
    expected = oracle_frames(data, frames, 1)
    got = run_frames(tmp_path, "front_end", data, frames + frames[:1], scribble=True, restart_before=len(frames))
    np.testing.assert_array_equal(got.pop()[0], expected[0][0], err_msg="after reset_state()")
    for k, (g, e) in enumerate(zip(got, expected)):
        np.testing.assert_array_equal(g[0], e[0], err_msg=f"frame {k}")
    assert len({e[0].tobytes() for e in expected}) == len(frames) and max(int(e[0].max()) for e in expected) > 0


@pytest.mark.parametrize("target", [emulated_core("cortex-m4")])
def test_front_end_matches_tflite_micro_on_the_emulated_core(target, tmp_path):
    """The test firmware calls the model twice (once to measure its stack, once to time it) and
    starts the state over in between (reset_state()): the outputs are one call's from the starting
    state, as on the host, not the second frame's with the noise estimate carried over."""
    data = front_end()
    frame = speech_like(3, seed=5)[1]
    once, twice = oracle_frames(data, [frame, frame], 1)
    got, = compiled(tmp_path, "front_end", data, frame, target)
    np.testing.assert_array_equal(got, once[0])
    assert not np.array_equal(once[0], twice[0])


# --- errors ----------------------------------------------------------------------------------
def _import_error(tmp_path, data: bytes) -> str:
    from tinsmith.errors import GraphError
    from tinsmith.load.tflite_model import load_tflite_spec
    (tmp_path / "m.tflite").write_bytes(data)
    with pytest.raises(GraphError) as e:
        load_tflite_spec(tmp_path / "m.tflite")
    assert str(e.value.loc).endswith("m.tflite")
    return str(e.value)


def test_bad_options_and_forms_are_named_errors(tmp_path):
    window = [Tensor("x", "int16", [8]), Tensor("w", "int16", [8], data=np.ones(8, np.int16)), Tensor("y", "int16", [8])]
    assert "SignalWindow options lack shift" in _import_error(tmp_path, model(window, [custom("SignalWindow", [0, 1], [2])],
                                                                              [0], [2]))
    assert "shift = 99 is not an integer in [0, 31]" in _import_error(
        tmp_path, model(window, [custom("SignalWindow", [0, 1], [2], shift=99)], [0], [2]))
    rfft = [Tensor("x", "int16", [24]), Tensor("y", "int16", [26])]
    assert "takes powers of two" in _import_error(
        tmp_path, model(rfft, [custom("SignalRfft", [0], [1], T=7, fft_length=24)], [0], [1]))
    rfft8 = [Tensor("x", "int8", [8]), Tensor("y", "int8", [10])]
    assert "(CUSTOM:SignalRfft) on int8 data (Tinsmith supports CUSTOM:SignalRfft on int16, int32, float32)" in \
        _import_error(tmp_path, model(rfft8, [custom("SignalRfft", [0], [1], T=9, fft_length=8)], [0], [1]))


def _tables(n: int, values) -> list[Tensor]:
    return [Tensor(f"t{i}", "int16", [len(values)], data=np.int16(values)) for i in range(n)]


MALFORMED = {
    "filter bank past its bins": (
        [Tensor("x", "uint32", [10]), *_tables(5, [0, 5, 20]), Tensor("y", "uint64", [2])],
        custom("SignalFilterBank", [0, 1, 2, 3, 4, 5], [6], num_channels=2), [0], [6],
        "channels reach past the 10 bins or the 3 weights"),
    "filter bank weights at run time": (
        [Tensor("x", "uint32", [10]), Tensor("w", "int16", [3]), *_tables(4, [0, 1, 1]), Tensor("y", "uint64", [2])],
        custom("SignalFilterBank", [0, 1, 2, 3, 4, 5], [6], num_channels=2), [0, 1], [6],
        "a SignalFilterBank weights computed at run time"),
    "stacker step past the stack": (
        [Tensor("x", "int16", [4]), Tensor("y", "int16", [8]), Tensor("v", "bool", [])],
        custom("SignalStacker", [0], [1, 2], num_channels=4, stacker_left_context=1, stacker_right_context=0,
               stacker_step=3), [0], [1, 2], "stacker_step lie in [1, left + right + 1]"),
    "energy past the spectrum": (
        [Tensor("x", "int16", [10]), Tensor("y", "uint32", [5])],
        custom("SignalEnergy", [0], [1], start_index=2, end_index=9), [0], [1],
        "needs 0 <= start_index <= end_index <= 5, got 2 and 9"),
    "framer step not dividing the input": (
        [Tensor("x", "int16", [10]), Tensor("y", "int16", [3, 4]), Tensor("v", "bool", [])],
        custom("SignalFramer", [0], [1, 2], frame_size=4, frame_step=3, prefill=False), [0], [1, 2],
        "input's last dimension must be a multiple of frame_step 3"),
    "pcan table too short": (
        [Tensor("x", "uint32", [4]), Tensor("n", "uint32", [4]), Tensor("l", "int16", [10], data=np.zeros(10, np.int16)),
         Tensor("y", "uint32", [4])], custom("SignalPCAN", [0, 1, 2], [3], snr_shift=6), [0, 1], [3],
        "gain table holds 10 entries; it needs 125"),
    "window of another length": (
        [Tensor("x", "int16", [8]), Tensor("w", "int16", [6], data=np.ones(6, np.int16)), Tensor("y", "int16", [8])],
        custom("SignalWindow", [0, 1], [2], shift=3), [0], [2], "input's last dimension must be the window's length 6"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_signal_operators_are_errors_at_the_file(case, tmp_path):
    from tinsmith.errors import TinsmithError
    from tinsmith.pipeline import lower
    tensors, op, inputs, outputs, message = MALFORMED[case]
    (tmp_path / "m.tflite").write_bytes(model(tensors, [op], inputs, outputs))
    with pytest.raises(TinsmithError) as e:
        lower(tmp_path / "m.tflite")
    assert message in str(e.value) and "m.tflite: error:" in str(e.value)


def test_damaged_options_are_an_error_not_a_traceback(tmp_path):
    data = bytearray(model([Tensor("x", "int16", [8]), Tensor("w", "int16", [8], data=np.ones(8, np.int16)),
                            Tensor("y", "int16", [8])], [custom("SignalWindow", [0, 1], [2], shift=3)], [0], [2]))
    options = data.find(b"shift")
    for k in range(options - 4, options + 12):
        broken = bytearray(data)
        broken[k] ^= 0xFF
        (tmp_path / "m.tflite").write_bytes(bytes(broken))
        from tinsmith.errors import GraphError
        from tinsmith.load.tflite_model import load_tflite_spec
        try:
            load_tflite_spec(tmp_path / "m.tflite")
        except GraphError:
            pass


def test_signal_operators_not_compiled_are_named(tmp_path):
    data = model([Tensor("x", "int16", [8]), Tensor("y", "int16", [8])], [custom("SignalResample", [0], [1])], [0], [1])
    message = _import_error(tmp_path, data)
    assert "'SignalResample' of TFLite Micro's signal library (audio front end) is not yet supported" in message


# --- the real micro-speech preprocessor --------------------------------------------------------
REAL_PREPROCESSOR = os.environ.get("TINSMITH_AUDIO_PREPROCESSOR", "")


@pytest.mark.skipif(not Path(REAL_PREPROCESSOR).is_file(),
                    reason="set TINSMITH_AUDIO_PREPROCESSOR to TFLite Micro's micro_speech "
                           "models/audio_preprocessor_int8.tflite (not in this repository)")
def test_tflite_micros_own_audio_preprocessor_matches_frame_after_frame(tmp_path):
    """The micro-speech example's own preprocessor (the signal operators, then CAST, STRIDED_SLICE,
    CONCATENATION and int32 arithmetic down to int8 features), a model this repository never held:
    25 frames on one workspace, each bit-exact with the interpreter."""
    data = Path(REAL_PREPROCESSOR).read_bytes()
    frames = speech_like(25, seed=11)
    expected = oracle_frames(data, frames, 1)
    got = run_frames(tmp_path, "audio_preprocessor", data, frames)
    for k, (g, e) in enumerate(zip(got, expected)):
        np.testing.assert_array_equal(g[0], e[0], err_msg=f"frame {k}")
