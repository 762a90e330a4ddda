#!/bin/bash
# SPDX-License-Identifier: MIT
# Install the Python packages the torch tests and the DCP benchmark use,
# from PyPI, pinned exactly: torch 2.13.0 (the version ckptd.dcp is written
# for; never an unpinned `torch`, which may pull a multi-GB CUDA build).
# Usage: scripts/pydeps.sh
set -euo pipefail
PY=${PYTHON:-python3}
want="2.13.0"
have=$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || true)
if [ "$have" != "$want" ]; then
        echo "installing torch==$want for $("$PY" -c 'import sys; print(sys.executable)')"
        "$PY" -m pip install --disable-pip-version-check -q "torch==$want"
fi
