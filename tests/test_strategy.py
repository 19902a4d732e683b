"""The strategy table (codegen/generate/backend.py, kernel_sets.py, backends.py): every registration
states its family and element types, a node reaches only a kernel that takes its types, a target
draws on several kernel sets, and a node no kernel takes is refused by name before any C++ exists."""
from __future__ import annotations

import numpy as np
import pytest
import yaml

from tinsmith.errors import GenerateError, TinsmithError
from tinsmith.generate.backend import ANY_TYPES, CPP, FAMILIES, LAYOUTS, ElementTypes, same, takes
from tinsmith.generate.backends import BACKENDS, backend_for
from tinsmith.generate.kernel_sets import ARM_DSP, KERNEL_SETS, VECTORS
from tinsmith.pipeline import compile_graph
from tinsmith.quant import fixed_point as fp
from tinsmith.targets import load_target
from tests.test_int8_kernels import conv_spec

# Kernels that only move or copy elements may take any type; every other registration names its types.
MOVES_ANY = {"movement", "sampling"}


def all_registrations():
    for kernel_set in KERNEL_SETS.values():
        for op, rows in kernel_set.traits.items():
            for row in rows:
                yield kernel_set.name, op, row


def test_every_registration_states_family_layout_and_element_types():
    rows = list(all_registrations())
    assert len(rows) > 150
    for set_name, op, row in rows:
        assert row.family in FAMILIES and row.layout in LAYOUTS, (set_name, op)
        if row.family not in MOVES_ANY and op not in ("Cast", "CastLike", "EyeLike"):
            declared = row.types.inputs + row.types.outputs
            assert any(s is not None for s in declared), f"{set_name} {op} declares no element type"


def test_the_fast_int8_kernels_take_int8_and_the_dsp_ones_16x8():
    sixteen = (("int16", "int8", "int64", "int32", "int32"), ("int16",))
    for kernel_set in (ARM_DSP, VECTORS):
        for op in ("QConv2D", "QDepthwise", "QFullyConnected"):
            rows = kernel_set.traits[op]
            assert any(r.types.accepts(("int8", "int8", "int32", "int32", "int32"), ("int8",)) for r in rows)
            assert not any(r.types.accepts(("int16", "int8", "int32", "int32", "int32"), ("int8",)) for r in rows)
            assert not any(r.types.accepts(("uint8", "int8", "int32", "int32", "int32"), ("uint8",)) for r in rows)
            assert any(r.types.accepts(*sixteen) for r in rows) == (kernel_set is ARM_DSP)


def test_element_types_match_by_position_and_variadic_tail():
    t = takes("float32", ("int32", "int64"), out="float32")
    assert t.accepts(("float32", "int64"), ("float32",))
    assert t.accepts(("float32", None), ("float32",))  # an omitted optional input
    assert not t.accepts(("float32", "float32"), ("float32",))
    assert t.describe() == "(float32, int32|int64) -> float32"
    concat = same(("int8", "float32"))
    assert concat.accepts(("int8",) * 5, ("int8",))
    assert not concat.accepts(("int8", "float32"), ("int8",))  # one type throughout
    assert ANY_TYPES.accepts(("bool", "string"), ("uint4",))
    with pytest.raises(ValueError, match="unknown element type"):
        takes("float33")


def test_targets_draw_on_several_kernel_sets_in_order():
    assert BACKENDS["cortex-m"].chain() == ["cortex-m", "arm-dsp", "fpu-registers", "cpp"]
    assert BACKENDS["host"].chain() == ["host", "avx512-int8", "vectors", "cpp"]  # avx512-int8: 512-bit hosts only
    assert "dot4_i32x16" in BACKENDS["host"].renderer.intrinsics and "dot4_i32x16" not in BACKENDS["cortex-m"].renderer.intrinsics
    # the renderer spells the intrinsics of every set the backend draws on, and no others
    assert "smlad" in BACKENDS["cortex-m"].renderer.intrinsics
    assert "smlad" not in BACKENDS["host"].renderer.intrinsics


TARGET_WITH_SETS = """\
target: m4-portable-float
description: a Cortex-M4 that keeps the DSP kernels and the portable float ones
toolchain: {prefix: arm-none-eabi-, cc: gcc, cxx: g++, ar: ar, ranlib: ranlib, nm: nm}
cpu_flags: [-mcpu=cortex-m4, -mthumb, -mfloat-abi=hard, -mfpu=fpv4-sp-d16]
optimize: -Os
ccflags: [-Wall, -Wextra]
cflags: [-std=c11]
cxxflags: [-std=c++17, -fno-exceptions, -fno-rtti]
linkflags: []
board: null
capabilities:
  backend: cortex-m
  fpu: fpv4-sp
  dsp: true
  float_registers: 32
  kernels: [arm-dsp, {sets}]
emulator: null
"""


def test_a_target_file_names_its_kernel_sets(tmp_path):
    path = tmp_path / "m4.yaml"
    path.write_text(TARGET_WITH_SETS.replace("{sets}", "cpp"))
    backend, caps = backend_for(load_target(path))
    assert backend.chain() == ["cortex-m", "arm-dsp", "cpp"]
    assert "smlad" in backend.renderer.intrinsics
    path.write_text(TARGET_WITH_SETS.replace("{sets}", "riscv-p"))
    with pytest.raises(TinsmithError) as info:
        backend_for(load_target(path))
    assert str(info.value).startswith(f"{path}:16:")
    assert "'kernels' names an unknown kernel set 'riscv-p'" in str(info.value)
    assert "the kernel sets are cpp, vectors, fpu-registers, arm-dsp, helium" in str(info.value)


def _qconv_graph(tmp_path, x_dtype: str, x_range: tuple[int, int]):
    """One QConv2D of an x_dtype input, int8 weights and int32 bias, with its inputs and the
    expected output from an independent Python-int evaluation."""
    rng = np.random.default_rng(5)
    shape, x_zp = (1, 5, 6, 3), 3
    x = rng.integers(*x_range, shape).astype(x_dtype)
    w = rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    b = rng.integers(-3000, 3000, 4).astype(np.int32)
    mult, shift = fp.conv_multipliers(0.01, 10.0 ** rng.uniform(-4, -2, 4), 0.2)
    attrs = {"strides": [1, 1], "dilations": [1, 1], "pads": [1, 1, 1, 1], "x_zero_point": x_zp,
             "y_scale": 0.2, "y_zero_point": -2}
    if x_dtype == "int16":  # (the output clamp's default is int8's range whatever the output type)
        attrs |= {"act_min": -32768, "act_max": 32767, "accumulator": "int32"}  # the spec: int32 sums
    doc = {"graph": "q", "inputs": {"x": {"dtype": x_dtype, "shape": list(shape),
                                           "quant": {"scale": 0.01, "zero_point": x_zp}}},
           "outputs": ["y"],
           "constants": {n: {"file": "w.npz", "key": n, "dtype": t} for n, t in
                         (("w", "int8"), ("b", "int32"), ("m", "int32"), ("s", "int32"))},
           "nodes": [{"op": "QConv2D", "name": "conv", "inputs": ["x", "w", "b", "m", "s"], "outputs": ["y"],
                      "attrs": attrs}]}
    (tmp_path / "q.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    np.savez(tmp_path / "w.npz", w=w, b=b, m=mult, s=shift)
    np.savez(tmp_path / "in.npz", x=x)
    # TFLite's scheme: int8 activations give int8 outputs, int16 ones (16x8) int16 outputs
    info = np.iinfo(np.int16 if x_dtype == "int16" else np.int8)
    want = np.clip(conv_spec(x, w, b, x_zp, mult, shift, attrs) - 2, info.min, info.max).astype(info.dtype)
    return tmp_path / "q.yaml", want


@pytest.mark.parametrize("target", ["host", "cortex-m4"])
def test_an_int16_convolution_takes_the_kernel_that_accepts_int16(tmp_path, tinsmith_cmd, target):
    # 16x8: the M4's DSP kernel set has a row of its own for int16 activations (SMLAD on re-paired
    # int16 lanes) in TFLite's symmetric scheme; this node has zero points, so it takes the
    # portable kernel there too, as on the host (whose int8 vector kernels take no int16). Neither
    # build fails in the C++ compiler, and both compute the specification.
    path, want = _qconv_graph(tmp_path, "int16", (-3000, 3000))
    compiled = compile_graph(path, target=target)
    (kernel,) = compiled.model.kernels
    assert "__smlad" not in kernel.source and "acc_row" not in kernel.source
    proc = tinsmith_cmd("run", "q.yaml", "--inputs", "in.npz", "--output", "out.npz", "--target", target,
                        cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "out.npz")["y"], want)


def test_the_same_int8_convolution_takes_the_dsp_kernel(tmp_path):
    path, _ = _qconv_graph(tmp_path, "int8", (-128, 128))
    (kernel,) = compile_graph(path, target="cortex-m4").model.kernels
    assert "__smlad" in kernel.source


def test_a_node_no_kernel_takes_is_refused_by_name_before_any_cpp(tmp_path):
    # a kernel set of one portable QConv2D that takes int8 alone: an int16 node is refused with
    # its name, its element types and what the kernels take
    from tinsmith.generate.backend import Backend
    narrow = Backend("narrow", parents=())
    narrow.register("QConv2D", family="convolution",
                    types=takes("int8", "int8", "int32", "int32", "int32", out="int8"))(CPP.functors["QConv2D"])
    path, _ = _qconv_graph(tmp_path, "int16", (-3000, 3000))
    with pytest.raises(GenerateError) as info:
        compile_graph(path, backend=narrow)
    e = info.value
    assert e.message == ("node 'conv': no kernel for primitive 'QConv2D' takes element types (int16, int8, int32, "
                         "int32, int32 -> int16) on the narrow backend; its kernels take (int8, int8, int32, int32, "
                         "int32) -> int8")
    assert (e.loc.line, e.loc.col) > (0, 0) and e.loc.path.endswith("q.yaml")
    assert not (tmp_path / "q.cpp").exists()


def test_element_types_reject_unknown_family_and_layout():
    with pytest.raises(ValueError, match="unknown kernel family"):
        CPP.register("Relu", family="convolutions", types=same("float32"))
    with pytest.raises(ValueError, match="unknown layout"):
        CPP.register("Relu", family="elementwise", layout="nchwc", types=same("float32"))
    assert isinstance(CPP.traits["Relu"][0].types, ElementTypes)
