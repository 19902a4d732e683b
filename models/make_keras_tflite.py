"""Small Keras models converted by TensorFlow's own TFLiteConverter, as users make .tflite files:
float32, int8 (full integer, int8 input and output) and 16x8 (int16 activations, int8 weights).

    pip install -e '.[models]'                       # TensorFlow: for this script only
    python models/make_keras_tflite.py               # writes tests/data/tflite/keras/NAME_KIND.tflite
    python models/make_keras_tflite.py -o DIR        # ... into DIR instead

Models (batch 1, seeded weights, calibrated on a seeded representative set):
  lstm_kws   keyword spotter: 12 frames x 10 features -> LSTM 16 (every step's output) -> the last
             step -> Dense 4 -> softmax (the LSTM becomes UNIDIRECTIONAL_SEQUENCE_LSTM); float32 and
             int8 (TensorFlow's converter has no 16x8 LSTM)
  conv_net   12x12x1 -> Conv2D 8 3x3 ReLU -> DepthwiseConv2D 3x3 ReLU6 -> MaxPool 2x2 -> Conv2D 8 1x1
             -> AveragePool to 1x1 -> Dense 4 -> softmax

tests/test_tflite_keras_models.py compiles each file with Tinsmith and compares it with the TFLite
Micro interpreter. Weights and calibration derive from fixed seeds; TensorFlow's version is
pinned in constraints.txt (the `models` extra), so the files are reproducible with it.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "tflite" / "keras"
KINDS = ("float32", "int8", "16x8")


def lstm_kws(tf):
    inputs = tf.keras.Input((12, 10), batch_size=1)
    h = tf.keras.layers.LSTM(16, return_sequences=True)(inputs)
    last = tf.keras.layers.Lambda(lambda t: t[:, -1, :])(h)
    logits = tf.keras.layers.Dense(4)(last)
    return tf.keras.Model(inputs, tf.keras.layers.Softmax()(logits)), (1, 12, 10)


def conv_net(tf):
    inputs = tf.keras.Input((12, 12, 1), batch_size=1)
    x = tf.keras.layers.Conv2D(8, 3, padding="same", activation="relu")(inputs)
    x = tf.keras.layers.DepthwiseConv2D(3, padding="valid")(x)
    x = tf.keras.layers.ReLU(6.0)(x)
    x = tf.keras.layers.MaxPool2D(2)(x)
    x = tf.keras.layers.Conv2D(8, 1)(x)
    x = tf.keras.layers.AveragePooling2D(5)(x)
    x = tf.keras.layers.Flatten()(x)
    logits = tf.keras.layers.Dense(4)(x)
    return tf.keras.Model(inputs, tf.keras.layers.Softmax()(logits)), (1, 12, 12, 1)


# model -> (maker, the kinds written). No 16x8 LSTM: TensorFlow's converter refuses it ("Quantization
# to 16x8-bit not yet supported for op: 'UNIDIRECTIONAL_SEQUENCE_LSTM'"; tests/tflite_recurrent_models.py
# writes one as TFLite Micro runs it instead).
MODELS = {"lstm_kws": (lstm_kws, ("float32", "int8")), "conv_net": (conv_net, KINDS)}


def convert(tf, keras_model, shape, kind: str) -> bytes:
    converter = tf.lite.TFLiteConverter.from_keras_model(keras_model)
    if kind != "float32":
        rng = np.random.default_rng(1)

        def representative():
            for _ in range(32):
                yield [rng.normal(0.0, 1.0, shape).astype(np.float32)]
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = representative
        ops = tf.lite.OpsSet
        converter.target_spec.supported_ops = [ops.TFLITE_BUILTINS_INT8 if kind == "int8" else
                                               ops.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8]
        converter.inference_input_type = converter.inference_output_type = tf.int8 if kind == "int8" else tf.int16
    return converter.convert()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--out", type=Path, default=OUT)
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # Keras 2 (tf-keras): the converter fuses its LSTM into UNIDIRECTIONAL_SEQUENCE_LSTM; Keras 3's
    # LSTM becomes a WHILE loop over tensor lists, and its int8 calibration crashes TensorFlow 2.20
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tensorflow as tf
    tf.keras.utils.set_random_seed(0)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, (make, kinds) in MODELS.items():
        keras_model, shape = make(tf)
        for kind in kinds:
            data = convert(tf, keras_model, shape, kind)
            path = args.out / f"{name}_{kind}.tflite"
            path.write_bytes(data)
            print(f"{path.name}: {len(data)} bytes")


if __name__ == "__main__":
    main()
