"""Full-integer int8 TensorFlow Lite versions of the four MLPerf Tiny models.

    python models/make_int8.py            # writes models/NAME_int8.tflite
    python models/make_int8.py -o DIR     # writes DIR/NAME_int8.tflite instead
    python models/make_int8.py --operators tests/data/tflite   # the kernel tests' small models

Needs TensorFlow (not a Tinsmith dependency: `pip install tensorflow` in a separate
environment); the .tflite files it made are kept in the repository, so tests and builds never
need it. Each float model of make_models.py (same layers, same seeded weights and
BatchNormalization statistics) is rebuilt as a Keras model in TFLite's NHWC layout, then
converted by TensorFlow Lite's converter with post-training full-integer quantization: int8
weights (per-channel for convolutions), int8 activations calibrated on 100 seeded
representative inputs, int8 input and output. The converter folds BatchNormalization into the
convolutions and fuses ReLUs, as it does for the MLPerf Tiny reference submissions.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_models  # noqa: E402  (the float models' definition)

CALIBRATION_SAMPLES = 100


def keras_model(net: "make_models.Net"):
    """The net as a Keras functional model on NHWC data, with its weights."""
    import tensorflow as tf
    layers = tf.keras.layers
    shape = net.shapes[net.input_name]
    nhwc = (shape[2], shape[3], shape[1]) if len(shape) == 4 else tuple(shape[1:])
    inp = tf.keras.Input(shape=nhwc, batch_size=1, name=net.input_name)
    values = {net.input_name: inp}
    deferred = []
    for layer in net.layers:
        x = [values[v] for v in layer.inputs if v in values]
        w = [net.weights[v] for v in layer.inputs if v in net.weights]
        a = layer.attrs
        if layer.op == "Conv":
            cout, cin_g, kh, kw = w[0].shape
            stride = a["strides"][0]
            if a["group"] == 1:
                k = layers.Conv2D(cout, (kh, kw), stride, padding="same", name=layer.name)
                out = k(x[0])
                deferred.append((k, [w[0].transpose(2, 3, 1, 0), w[1]]))
            else:  # depthwise: one filter per channel
                k = layers.DepthwiseConv2D((kh, kw), stride, padding="same", name=layer.name)
                out = k(x[0])
                deferred.append((k, [w[0].transpose(2, 3, 0, 1), w[1]]))
        elif layer.op == "BatchNormalization":
            k = layers.BatchNormalization(epsilon=a["epsilon"], name=layer.name)
            out = k(x[0])
            deferred.append((k, w))  # gamma, beta, moving mean, moving variance
        elif layer.op == "Relu":
            out = layers.ReLU(name=layer.name)(x[0])
        elif layer.op == "Add":
            out = layers.Add(name=layer.name)(x)
        elif layer.op == "GlobalAveragePool":
            out = layers.GlobalAveragePooling2D(keepdims=True, name=layer.name)(x[0])
        elif layer.op == "AveragePool":
            out = layers.AveragePooling2D(tuple(a["kernel_shape"]), tuple(a["strides"]), name=layer.name)(x[0])
        elif layer.op == "Flatten":
            out = layers.Flatten(name=layer.name)(x[0])
        elif layer.op == "Gemm":
            k = layers.Dense(w[0].shape[0], name=layer.name)
            out = k(x[0])
            deferred.append((k, [w[0].T, w[1]]))
        elif layer.op == "Softmax":
            out = layers.Softmax(name=layer.name)(x[0])
        else:
            raise ValueError(f"no Keras layer for {layer.op}")
        values[layer.outputs[0]] = out
    model = tf.keras.Model(inp, values[net.output_name], name=net.name)
    for k, weights in deferred:
        k.set_weights([np.asarray(v, np.float32) for v in weights])
    return model


def nhwc(x: np.ndarray) -> np.ndarray:
    return x.transpose(0, 2, 3, 1) if x.ndim == 4 else x


def full_integer(model, representative) -> bytes:
    """The converter's post-training full-integer quantization: int8 weights, activations,
    input and output, calibrated on the representative inputs."""
    import tensorflow as tf
    conv = tf.lite.TFLiteConverter.from_keras_model(model)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = representative
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    conv.inference_input_type = tf.int8
    conv.inference_output_type = tf.int8
    return conv.convert()


def convert(name: str) -> bytes:
    """The int8 .tflite flatbuffer of one architecture."""
    net = make_models.build(name)
    model = keras_model(net)
    # the Keras model computes what the float ONNX model does (NHWC in, same output)
    x = make_models.sample_input(net, seed=0)
    want = make_models.evaluate(net, x)
    got = model(nhwc(x)).numpy()
    assert np.allclose(got, want, rtol=1e-3, atol=1e-4), (name, np.abs(got - want).max())

    def representative():
        for i in range(CALIBRATION_SAMPLES):
            yield [nhwc(make_models.sample_input(net, seed=5000 + i))]
    return full_integer(model, representative)


def operator_models() -> dict:
    """Small Keras models, one TFLite operator (or fused pair) each, for the kernel tests: shapes
    with odd sizes, windows over the borders, standalone activations the converter keeps."""
    import tensorflow as tf
    layers = tf.keras.layers

    def model(shape, fn):
        inputs = [tf.keras.Input(s, batch_size=1) for s in shape] if isinstance(shape, list) else \
            tf.keras.Input(shape, batch_size=1)
        return tf.keras.Model(inputs, fn(inputs)), shape
    rng = np.random.default_rng(9)
    conv = layers.Conv2D(5, (3, 2), strides=(2, 1), padding="same", activation="relu6")
    dw = layers.DepthwiseConv2D((3, 3), strides=2, padding="same", depth_multiplier=2)
    return {
        "relu": model((5, 7, 3), lambda x: layers.ReLU()(x)),
        "mul_relu": model((5, 7, 3), lambda x: layers.ReLU(6.0)(x * 2.0)),  # fused into MUL
        "add_relu": model([(4, 5, 6), (4, 5, 6)], lambda xs: layers.ReLU()(layers.Add()(xs))),
        "mul": model([(4, 5, 6), (4, 5, 6)], lambda xs: layers.Multiply()(xs)),
        "avg_pool": model((7, 6, 5), lambda x: layers.AveragePooling2D((3, 2), (2, 2), padding="same")(x)),
        "max_pool": model((7, 6, 5), lambda x: layers.MaxPooling2D((3, 3), (2, 2), padding="same")(x)),
        "pad_concat": model((3, 4, 5), lambda x: layers.Concatenate()([layers.ZeroPadding2D(((1, 0), (2, 1)))(x),
                                                                       layers.ZeroPadding2D(((0, 1), (1, 2)))(x)])),
        "softmax_beta": model((37,), lambda x: layers.Softmax()(x * 3.0)),
        "conv_relu6": model((9, 7, 3), conv),
        "depthwise": model((9, 8, 7), dw),
    }, rng


def convert_operator(m, shape, rng) -> bytes:
    """The int8 .tflite flatbuffer of one operator model, calibrated on seeded normal inputs."""
    shapes = shape if isinstance(shape, list) else [shape]

    def representative():
        for _ in range(50):
            yield [(2.0 * rng.standard_normal((1, *s))).astype(np.float32) for s in shapes]
    return full_integer(m, representative)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--out-dir", type=Path, default=HERE)
    parser.add_argument("--operators", type=Path, metavar="DIR",
                        help="write the single-operator models of the kernel tests to DIR instead")
    parser.add_argument("names", nargs="*", default=list(make_models.ARCHITECTURES))
    args = parser.parse_args(argv)
    if args.operators:
        args.operators.mkdir(parents=True, exist_ok=True)
        models, rng = operator_models()
        for name, (m, shape) in models.items():
            path = args.operators / f"{name}.tflite"
            path.write_bytes(convert_operator(m, shape, rng))
            print(f"{path}: {path.stat().st_size} bytes")
        return 0
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for name in args.names:
        path = args.out_dir / f"{name}_int8.tflite"
        path.write_bytes(convert(name))
        print(f"{path}: {path.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
