"""Integer arithmetic of quantized kernels, as TensorFlow Lite's reference kernels define it."""
