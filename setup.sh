#!/bin/sh
# Sets Tinsmith up on a fresh Debian machine with Python 3.11 and g++:
# - a virtual environment in .venv (or the one already active), with Tinsmith installed in it
#   from this checkout (editable, with the test extras), at the versions constraints.txt pins;
# - as root with apt, the Arm and RISC-V cross compilers and QEMU that the firmware targets use, make,
#   cmake and ninja for the integration examples, Graphviz, which lays out the graph on the report
#   pages, and Chromium with its driver, in which the tests open those pages.
# Then `. .venv/bin/activate` puts `scons`, `tinsmith` and `python` with Tinsmith on PATH.
set -eu
cd "$(dirname "$0")"
if [ -n "${VIRTUAL_ENV:-}" ]; then
  python=python
else
  [ -x .venv/bin/python ] || python3 -m venv .venv
  python=.venv/bin/python
fi
"$python" -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".[test]"

# Debian packages the firmware targets and the integration examples use, by the command each provides.
PACKAGES=""
need() { command -v "$1" >/dev/null || PACKAGES="$PACKAGES $2"; }
need arm-none-eabi-g++ "gcc-arm-none-eabi libnewlib-arm-none-eabi libstdc++-arm-none-eabi-newlib"
need qemu-system-arm qemu-system-arm
need riscv64-unknown-elf-gcc "gcc-riscv64-unknown-elf picolibc-riscv64-unknown-elf"
need qemu-system-riscv32 qemu-system-misc
need make make
need cmake cmake
need ninja ninja-build
need dot graphviz
need chromium chromium
need chromedriver chromium-driver
[ -n "$PACKAGES" ] || exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $PACKAGES >/dev/null
else
  echo "setup.sh: install$PACKAGES for the Cortex-M and RISC-V targets, the integration examples and the browser tests (needs root)" >&2
fi
