"""QDQ-quantized ONNX versions of the float MLPerf Tiny models, made with ONNX Runtime's quantizer.

    python models/make_qdq.py                 # writes models/kws_dscnn_qdq.onnx
    python models/make_qdq.py -o DIR kws_dscnn vww_mobilenet

Each float model of make_models.py is quantized by onnxruntime.quantization.quantize_static:
QDQ format (QuantizeLinear / DequantizeLinear pairs around the float operators), int8 (or, with
--activations uint8, uint8) activations and int8 per-channel weights, calibrated (MinMax) on
seeded random inputs drawn as make_models.sample_input draws them. ONNX Runtime is a test
dependency, so tests make the files on the fly; the script writes them for inspection.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_models  # noqa: E402  (the float models' definition)

CALIBRATION_SAMPLES = 32


class _Seeded:
    """ONNX Runtime's CalibrationDataReader protocol over seeded sample inputs."""

    def __init__(self, net: "make_models.Net", count: int):
        self.feeds = iter([{net.input_name: make_models.sample_input(net, seed=2000 + k)} for k in range(count)])

    def get_next(self):
        return next(self.feeds, None)


def quantize(name: str, out: Path, samples: int = CALIBRATION_SAMPLES, activations: str = "int8") -> Path:
    """Write the QDQ model of architecture `name` to `out` (activations int8 or uint8, weights int8
    per channel); returns `out`."""
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    net = make_models.build(name)
    with tempfile.TemporaryDirectory() as tmp:
        float_path = Path(tmp) / f"{name}.onnx"
        float_path.write_bytes(make_models.to_onnx(net).SerializeToString(deterministic=True))
        # ONNX Runtime's recommended pre-processing: BatchNormalization folded into the
        # convolutions, so the quantizer sees Conv (+ Relu) as a deployed model has it
        prepared = Path(tmp) / f"{name}_prepared.onnx"
        quant_pre_process(str(float_path), str(prepared), skip_symbolic_shape=True)
        quantize_static(str(prepared), str(out), _Seeded(net, samples), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QInt8 if activations == "int8" else QuantType.QUInt8,
                        weight_type=QuantType.QInt8, per_channel=True,
                        calibrate_method=CalibrationMethod.MinMax)
    onnx.checker.check_model(onnx.load(str(out)), full_check=True)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", default=["kws_dscnn"], choices=sorted(make_models.ARCHITECTURES))
    p.add_argument("-o", "--out-dir", type=Path, default=HERE)
    p.add_argument("--activations", choices=("int8", "uint8"), default="int8")
    args = p.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for name in args.names:
        print(quantize(name, args.out_dir / f"{name}_qdq.onnx", activations=args.activations))
    return 0


if __name__ == "__main__":
    sys.exit(main())
