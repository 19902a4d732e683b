#!/bin/sh
# Generates the model into lib/vibration/src, a PlatformIO library holding only what it
# compiles: vibration.cpp, vibration.hpp, vibration.h and the two runtime headers they
# include. Run it again after editing vibration.yaml or its weights; files whose bytes do
# not change keep their timestamps, so PlatformIO recompiles nothing for them. The model is
# generated for the board's core (the nucleo_f446re's Cortex-M4; TINSMITH_TARGET overrides it).
set -eu
cd "$(dirname "$0")"
TINSMITH=${TINSMITH:-tinsmith}
$TINSMITH generate vibration.yaml -o lib/vibration/src --target "${TINSMITH_TARGET:-cortex-m4}" --library-only
mkdir -p lib/vibration/src/tinsmith
INCLUDE=$($TINSMITH include-dir)
cp -p "$INCLUDE/tinsmith/buffer.hpp" "$INCLUDE/tinsmith/math.hpp" lib/vibration/src/tinsmith/
