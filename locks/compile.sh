#!/usr/bin/env bash
# Regenerates the locks CI installs from: `bash locks/compile.sh` (needs uv: pip install uv).
#
# pyproject.toml declares ranges; each lock pins every package of one stack, with hashes,
# for Python 3.11 on x86-64 Linux, wheels only:
#   newest.txt  torch 2.13.0+cpu, the newest release of everything else (numpy 2), and
#               the docs extra (Sphinx, MyST) for make docs
#   oldest.txt  torch 2.2.1 + torchdata 0.7.1, the lowest release of every other range
# torch 2.13.0+cpu is PyTorch's CPU build, not on PyPI's index: it is read from
# $TORCH_CPU_WHEELS, a folder or page of wheels (default /opt/wheels, where this project's
# machines keep it; elsewhere https://download.pytorch.org/whl/cpu/torch/). pip installs
# the lock from the same place (its --find-links).
set -euo pipefail
cd "$(dirname "$0")/.."
UV=${UV:-uv}
common=(pyproject.toml --extra dev --python-version 3.11 --only-binary :all:
        --generate-hashes --custom-compile-command "bash locks/compile.sh")
"$UV" pip compile "${common[@]}" --extra docs locks/newest.in \
    --find-links "${TORCH_CPU_WHEELS:-/opt/wheels}" -o locks/newest.txt
"$UV" pip compile "${common[@]}" locks/oldest.in --resolution lowest-direct -o locks/oldest.txt
