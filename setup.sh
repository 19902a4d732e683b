#!/bin/sh
# Installs what Tinsmith needs on a fresh Debian machine with Python 3.11 and g++:
# the Python packages, and (as root, with apt) the Arm cross compiler and QEMU that the
# firmware targets use.
set -eu
cd "$(dirname "$0")"
PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --quiet --disable-pip-version-check -r requirements.txt
ARM_PACKAGES="gcc-arm-none-eabi libnewlib-arm-none-eabi libstdc++-arm-none-eabi-newlib qemu-system-arm"
if command -v arm-none-eabi-g++ >/dev/null && command -v qemu-system-arm >/dev/null; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $ARM_PACKAGES >/dev/null
else
  echo "setup.sh: install $ARM_PACKAGES for the Cortex-M targets (needs root)" >&2
fi
