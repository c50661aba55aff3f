#!/usr/bin/env sh
# Installs NVRTC 13.0 from PyPI when it is missing: fa4-gen compiles kernels with it and
# needs no CUDA toolkit and no GPU. Pinned to 13.0.x because the GPU hosts run CUDA 13.0.
# Also, best effort, nvdisasm (`fa4-gen sass` reads kernels' main loops with it; its test
# skips without it): any version that reads sm_90 cubins, none is published for 13.0.
set -eu
pip_install() {
    python3 -m pip install --quiet --disable-pip-version-check "$1" \
        || python3 -m pip install --quiet --disable-pip-version-check --user "$1" \
        || python3 -m pip install --quiet --disable-pip-version-check --break-system-packages "$1"
}
has() {
    python3 - "$1" "$2" <<'PY' 2>/dev/null
import importlib.metadata as m, sys
sys.exit(0 if m.version(sys.argv[1]).startswith(sys.argv[2]) else 1)
PY
}
VERSION=13.0.88
if ! has nvidia-cuda-nvrtc 13.0.; then
    echo "installing nvidia-cuda-nvrtc==$VERSION from PyPI" >&2
    pip_install "nvidia-cuda-nvrtc==$VERSION"
fi
if ! has nvidia-cuda-nvdisasm 13. && ! command -v nvdisasm >/dev/null 2>&1; then
    echo "installing nvidia-cuda-nvdisasm from PyPI (optional)" >&2
    pip_install "nvidia-cuda-nvdisasm>=13.2,<14" || echo "nvdisasm not installed: fa4-gen sass and its test will skip" >&2
fi
