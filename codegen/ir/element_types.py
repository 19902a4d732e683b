"""Element types by name, for steps that need no NumPy (tinsmith.ir.graph gives their NumPy and C++
spellings)."""

# Types of fewer than 16 bits, which only Cast and CastLike convert to and from: one byte per
# element, as NumPy (ml_dtypes) holds them, not packed as in an ONNX file.
NARROW_DTYPES = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu",
                 "float4_e2m1fn", "int4", "uint4", "int2", "uint2")
