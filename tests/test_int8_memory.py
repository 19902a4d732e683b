"""The int8 models' workspace: convolutions run their tiles in raster order
(quantized_windows.row_major), so each 3x3 convolution's output goes over the input it consumes,
a row and two pixels below it, and the plan checker (run by every compile) proves it on the
generated code. ic_resnet8 must stay within 0.8x of TFLite Micro's 55.0 KB arena."""
from __future__ import annotations

from pathlib import Path

import pytest

from tinsmith.pipeline import compile_graph
from tinsmith.planners.check import check_plan

MODELS = Path(__file__).resolve().parents[1] / "models"
TFLM_ARENA = {"ic_resnet8": 55.0e3, "kws_dscnn": 22.8e3}


@pytest.mark.parametrize("target", ["cortex-m4", "host"])
def test_ic_resnet8_workspace_is_within_0_8_of_tflite_micro(target):
    c = compile_graph(MODELS / "ic_resnet8_int8.tflite", target=target)
    check_plan(c.model)
    assert c.plan.workspace_bytes <= 0.8 * TFLM_ARENA["ic_resnet8"], c.plan.workspace_bytes
    # the stage convolutions write over their inputs: the output at most a row and two pixels below,
    # and on the Cortex-M4 one pixel more (its 3x3 kernel computes two pixels at a time)
    shifts = {(out, inp): s for out, inp, s in c.plan.overlaps}
    pixels = 2 + (1 if target == "cortex-m4" else 0)
    bound = -(32 + pixels) * 16  # a 32-wide row of 16 channels, and the pixels
    assert bound <= shifts[("ic_resnet8_1_s1_bn2_1_batchnorm_add_1_23", "ic_resnet8_1_s1_relu1_1_Relu_22")] < 0


def test_kws_workspace_is_below_its_operator_bound():
    c = compile_graph(MODELS / "kws_dscnn_int8.tflite", target="cortex-m4")
    assert c.plan.workspace_bytes < c.plan.operator_lower_bound_bytes
    assert c.plan.workspace_bytes <= 0.5 * TFLM_ARENA["kws_dscnn"]
