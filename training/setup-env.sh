#!/usr/bin/env bash
# Create the training environment: LLaMA-Factory, SkyRL (PromptDataset + entrypoints) and Modal,
# pinned, in its own virtual environment (default .venv-train; tracelake finds it there, or set
# TRACELAKE_TRAIN_ENV). About 1-2 minutes and 2 GB with a warm pip cache.
#
#   bash training/setup-env.sh [VENV_DIR]
#
# On a machine whose torch has no CUDA, PyPI's torchvision/torchaudio wheels cannot load
# ("operator torchvision::nms does not exist", "_torchaudio.abi3.so"); transformers then fails to
# import. There the script removes torchvision and leaves a torchaudio module that only raises
# when used: LLaMA-Factory imports torchaudio at start-up but needs it only for audio data.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${1:-.venv-train}"
stamp="$venv/.tracelake-requirements"
want="$(cat "$here/requirements.txt" "$here/requirements-nodeps.txt" "$here/constraints.txt" | sha256sum | cut -c1-16)"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "training environment $venv is up to date"
  exit 0
fi
python3 -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
"${pip[@]}" install -r "$here/requirements.txt" -c "$here/constraints.txt"
"${pip[@]}" install --no-deps --ignore-requires-python -r "$here/requirements-nodeps.txt"
if ! "$venv/bin/python" -c "import torch, sys; sys.exit(0 if torch.version.cuda else 1)"; then
  "${pip[@]}" uninstall -y torchvision torchaudio
  site="$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")"
  mkdir -p "$site/torchaudio"
  cat > "$site/torchaudio/__init__.py" <<'PY'
"""Placeholder: no CPU build of torchaudio exists for this torch (set up by training/setup-env.sh)."""


def __getattr__(name):
    raise ImportError(f"torchaudio.{name}: torchaudio is not installed in this CPU training environment")
PY
fi
"$venv/bin/python" -c "import llamafactory, skyrl_train.dataset, modal" 2>/dev/null || {
  echo "training environment $venv: imports failed" >&2; exit 1; }
echo "$want" > "$stamp"
echo "training environment ready: $venv ($("$venv/bin/python" -c 'import torch; print("torch", torch.__version__)'))"
