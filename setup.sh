#!/bin/sh
# Installs what Tinsmith needs on a fresh Debian machine with Python 3.11 and g++.
set -eu
cd "$(dirname "$0")"
PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --quiet --disable-pip-version-check -r requirements.txt
