#!/usr/bin/env sh
# Installs NVRTC 13.0 from PyPI when it is missing: fa4-gen compiles kernels with it and
# needs no CUDA toolkit and no GPU. Pinned to 13.0.x because the GPU hosts run CUDA 13.0.
set -eu
VERSION=13.0.88
if python3 - <<'PY' 2>/dev/null
import importlib.metadata as m, sys
sys.exit(0 if m.version("nvidia-cuda-nvrtc").startswith("13.0.") else 1)
PY
then
    exit 0
fi
echo "installing nvidia-cuda-nvrtc==$VERSION from PyPI" >&2
python3 -m pip install --quiet --disable-pip-version-check "nvidia-cuda-nvrtc==$VERSION" \
    || python3 -m pip install --quiet --disable-pip-version-check --user "nvidia-cuda-nvrtc==$VERSION" \
    || python3 -m pip install --quiet --disable-pip-version-check --break-system-packages "nvidia-cuda-nvrtc==$VERSION"
