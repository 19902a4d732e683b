"""TFLite Micro's signal-library custom operators (the audio front end) onto the primitives of
codegen/ops/tflm_signal.py: one registration per custom code, the element type of its data input
that TFLite Micro registers it for, and the converter. A custom operator's options are a
FlexBuffers map (its attributes by name); tables the kernels look up (FFT twiddles, the log
correction) are added as constants."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from tinsmith.load.tflite_reader import Reader, Unsupported
from tinsmith.ops import tflm_signal as sig


def custom_options(r: Reader, op, code: str, needed: tuple[str, ...]) -> Mapping[str, Any]:
    """The operator's FlexBuffers options as a dict; every name in `needed` must be there."""
    from flatbuffers import flexbuffers
    raw = op.CustomOptionsAsNumpy()
    data = bytes(raw.astype(np.uint8)) if isinstance(raw, np.ndarray) else b""
    try:
        opts = flexbuffers.Loads(data) if data else {}
    except Exception as e:  # the FlexBuffers reader's errors on damaged bytes vary by kind
        raise Unsupported(f"{code} options are not a valid FlexBuffers map ({type(e).__name__})") from None
    if not isinstance(opts, dict):
        raise Unsupported(f"{code} options are not a FlexBuffers map")
    missing = [n for n in needed if n not in opts]
    if missing:
        raise Unsupported(f"{code} options lack {', '.join(missing)}")
    return opts


def _int(opts: Mapping[str, Any], name: str, low: int = 0, high: int = 63) -> int:
    v = opts[name]
    if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
        raise Unsupported(f"option {name} = {v!r} is not an integer in [{low}, {high}]")
    return int(v)


def _check_output(r: Reader, y: int, shape: tuple[int, ...], dtype: str, code: str) -> None:
    if tuple(r.shape(y)) != tuple(shape) or r.dtype(y) != dtype:
        raise Unsupported(f"{code} output '{r.original(y)}' is {r.dtype(y)} {list(r.shape(y))}; the operator "
                          f"computes {dtype} {list(shape)}")


def window(r: Reader, op, inputs, outputs) -> None:
    opts = custom_options(r, op, "SignalWindow", ("shift",))
    r.emit("SignalWindow", [r.value(inputs[0]), r.value(inputs[1])], [r.names[outputs[0]]],
           {"shift": _int(opts, "shift", 0, 31)})


def fft_auto_scale(r: Reader, op, inputs, outputs) -> None:
    if len(outputs) != 2:
        raise Unsupported("SignalFftAutoScale needs two outputs (the frame and its scale bits)")
    r.emit("SignalFftAutoScale", [r.value(inputs[0])], [r.names[o] for o in outputs], {})


def _transform(code: str, inverse: bool):
    """SignalRfft or SignalIrfft: its fft_length, then the node with its tables as constants."""
    prefix = "irfft" if inverse else "rfft"

    def convert(r: Reader, op, inputs, outputs) -> None:
        opts = custom_options(r, op, code, ("fft_length",))
        length = _int(opts, "fft_length", 4, 1 << 16)
        if length & (length - 1):
            raise Unsupported(f"{code} fft_length {length}: Tinsmith's fixed-point FFT takes powers of two")
        x = int(inputs[0])
        out_shape = (*r.shape(x)[:-1], length if inverse else length + 2)
        _check_output(r, outputs[0], out_shape, r.dtype(x), code)
        twiddles, split, order = sig.rfft_tables(length, r.dtype(x), inverse)
        r.emit(code, [r.value(x), r.add_constant(f"{prefix}_twiddles_{length}", twiddles),
                      r.add_constant(f"{prefix}_split_twiddles_{length}", split),
                      r.add_constant(f"{prefix}_order_{length}", order)],
               [r.names[outputs[0]]], {"fft_length": length})
    return convert


rfft, irfft = _transform("SignalRfft", inverse=False), _transform("SignalIrfft", inverse=True)


def energy(r: Reader, op, inputs, outputs) -> None:
    opts = custom_options(r, op, "SignalEnergy", ("start_index", "end_index"))
    r.emit("SignalEnergy", [r.value(inputs[0])], [r.names[outputs[0]]],
           {"start_index": _int(opts, "start_index", 0, 1 << 16), "end_index": _int(opts, "end_index", 0, 1 << 16)})


def filter_bank(r: Reader, op, inputs, outputs) -> None:
    opts = custom_options(r, op, "SignalFilterBank", ("num_channels",))
    for i, what in zip(inputs[1:6], sig.FILTER_BANK_TABLES):
        r.constant_data(i, f"SignalFilterBank {what}")  # a table computed at run time is refused here
    r.emit("SignalFilterBank", [r.value(i) for i in inputs[:6]], [r.names[outputs[0]]],
           {"num_channels": _int(opts, "num_channels", 1, 1 << 12)})


def filter_bank_square_root(r: Reader, op, inputs, outputs) -> None:
    r.emit("SignalFilterBankSquareRoot", [r.value(inputs[0]), r.value(inputs[1])], [r.names[outputs[0]]], {})


def filter_bank_log(r: Reader, op, inputs, outputs) -> None:
    opts = custom_options(r, op, "SignalFilterBankLog", ("input_correction_bits", "output_scale"))
    r.emit("SignalFilterBankLog", [r.value(inputs[0]), r.add_constant("log_correction", sig.log_table())],
           [r.names[outputs[0]]], {"input_correction_bits": _int(opts, "input_correction_bits", 0, 31),
                                   "output_scale": _int(opts, "output_scale", 0, (1 << 32) - 1)})


def pcan(r: Reader, op, inputs, outputs) -> None:
    opts = custom_options(r, op, "SignalPCAN", ("snr_shift",))
    r.emit("SignalPCAN", [r.value(i) for i in inputs[:3]], [r.names[outputs[0]]],
           {"snr_shift": _int(opts, "snr_shift", 0, 63)})


def spectral_subtraction(r: Reader, op, inputs, outputs) -> None:
    opts = custom_options(r, op, "SignalFilterBankSpectralSubtraction", sig.SPECTRAL_SUBTRACTION_ATTRS)
    if len(outputs) != 2:
        raise Unsupported("SignalFilterBankSpectralSubtraction needs two outputs (the frame and the noise estimate)")
    attrs = {n: _int(opts, n, 0, (1 << 32) - 1) for n in sig.SPECTRAL_SUBTRACTION_ATTRS if n != "clamping"}
    attrs["clamping"] = int(bool(opts["clamping"]))
    if attrs["smoothing_bits"] > 31 or attrs["spectral_subtraction_bits"] > 63:
        raise Unsupported("SignalFilterBankSpectralSubtraction shifts by more bits than its integers hold")
    r.emit("SignalFilterBankSpectralSubtraction", [r.value(inputs[0])], [r.names[o] for o in outputs], attrs)


def delay(r: Reader, op, inputs, outputs) -> None:
    opts = custom_options(r, op, "SignalDelay", ("delay_length",))
    r.emit("SignalDelay", [r.value(inputs[0])], [r.names[outputs[0]]],
           {"delay_length": _int(opts, "delay_length", 0, 1 << 16)})


def framer(r: Reader, op, inputs, outputs) -> None:
    opts = custom_options(r, op, "SignalFramer", ("frame_size", "frame_step", "prefill"))
    if len(outputs) != 2:
        raise Unsupported("SignalFramer needs two outputs (the frames and whether they are valid)")
    size, step = _int(opts, "frame_size", 1, 1 << 16), _int(opts, "frame_step", 1, 1 << 16)
    if step > size:
        raise Unsupported(f"SignalFramer frame_step {step} exceeds frame_size {size}")
    r.emit("SignalFramer", [r.value(inputs[0])], [r.names[o] for o in outputs],
           {"frame_size": size, "frame_step": step, "prefill": int(bool(opts["prefill"]))})


def stacker(r: Reader, op, inputs, outputs) -> None:
    names = ("num_channels", "stacker_left_context", "stacker_right_context", "stacker_step")
    opts = custom_options(r, op, "SignalStacker", names)
    if len(outputs) != 2:
        raise Unsupported("SignalStacker needs two outputs (the stack and whether it is valid)")
    r.emit("SignalStacker", [r.value(inputs[0])], [r.names[o] for o in outputs],
           {n: _int(opts, n, 0, 1 << 12) for n in names})


def overlap_add(r: Reader, op, inputs, outputs) -> None:
    opts = custom_options(r, op, "SignalOverlapAdd", ("frame_step",))
    r.emit("SignalOverlapAdd", [r.value(inputs[0])], [r.names[outputs[0]]],
           {"frame_step": _int(opts, "frame_step", 1, 1 << 16)})


# custom code -> (element types of its data input, converter, inputs it needs)
SIGNAL_OPERATORS = {
    "SignalWindow": (("int16",), window, 2),
    "SignalFftAutoScale": (("int16",), fft_auto_scale, 1),
    "SignalRfft": (sig.RFFT_TYPES, rfft, 1),
    "SignalIrfft": (sig.RFFT_TYPES, irfft, 1),
    "SignalEnergy": (("int16",), energy, 1),
    "SignalFilterBank": (("uint32",), filter_bank, 6),
    "SignalFilterBankSquareRoot": (("uint64",), filter_bank_square_root, 2),
    "SignalFilterBankLog": (("uint32",), filter_bank_log, 1),
    "SignalFilterBankSpectralSubtraction": (("uint32",), spectral_subtraction, 1),
    "SignalPCAN": (("uint32",), pcan, 3),
    "SignalDelay": (("int16",), delay, 1),
    "SignalFramer": (("int16",), framer, 1),
    "SignalStacker": (("int16",), stacker, 1),
    "SignalOverlapAdd": (sig.OVERLAP_ADD_TYPES, overlap_add, 1),
}
