#!/usr/bin/env bash
# Create the SkyRL environment: skyrl 0.4 (the unified package; Python >= 3.12) with what its
# PromptDataset and typed config need, pinned, in its own virtual environment (default .venv-skyrl;
# tracelake finds it there, or set TRACELAKE_SKYRL_ENV). About 40 s with a warm pip cache; nothing
# is done when the pins have not changed since the last run.
#
#   bash training/setup-skyrl-env.sh [VENV_DIR]
#
# The interpreter: $TRACELAKE_PYTHON312, else python3.12 / python3.13 on PATH, else pyenv's newest 3.12
# (then 3.13). skyrl 0.4 needs transformers 5.x, which LLaMA-Factory 0.9.5 refuses: hence a second
# environment beside .venv-train (bash training/setup-env.sh), which keeps skyrl-train 0.3.1.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${1:-.venv-skyrl}"
stamp="$venv/.tracelake-requirements"
want="$(cat "$here/skyrl/requirements.txt" "$here/skyrl/requirements-nodeps.txt" "$here/skyrl/constraints.txt" \
        | sha256sum | cut -c1-16)"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "SkyRL environment $venv is up to date"
  exit 0
fi

find_python() {
  if [[ -n "${TRACELAKE_PYTHON312:-}" ]]; then echo "$TRACELAKE_PYTHON312"; return; fi
  local p
  for p in python3.12 python3.13; do
    if command -v "$p" >/dev/null && "$p" -c 'import sys' 2>/dev/null; then command -v "$p"; return; fi
  done
  if command -v pyenv >/dev/null; then
    for p in $(ls -d "$(pyenv root)"/versions/3.12.* 2>/dev/null | sort -V -r) \
             $(ls -d "$(pyenv root)"/versions/3.13.* 2>/dev/null | sort -V -r); do
      if [[ -x "$p/bin/python3" ]]; then echo "$p/bin/python3"; return; fi
    done
  fi
  return 1
}
python="$(find_python)" || {
  echo "setup-skyrl-env: no Python >= 3.12 found (skyrl 0.4 needs it): set TRACELAKE_PYTHON312" >&2; exit 1; }
"$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' || {
  echo "setup-skyrl-env: $python is not Python >= 3.12" >&2; exit 1; }

if [[ -e "$venv" && ! -f "$venv/pyvenv.cfg" ]]; then
  echo "setup-skyrl-env: $venv exists and is not a virtual environment: not touching it" >&2; exit 1
fi
rm -rf "$venv"   # a stale environment (other pins, maybe another Python): rebuilt whole
"$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
"${pip[@]}" install -r "$here/skyrl/requirements.txt" -c "$here/skyrl/constraints.txt"
"${pip[@]}" install --no-deps -r "$here/skyrl/requirements-nodeps.txt"
"$venv/bin/python" -c "import skyrl.train.dataset, skyrl.train.config" 2>/dev/null || {
  echo "SkyRL environment $venv: imports failed" >&2; exit 1; }
echo "$want" > "$stamp"
echo "SkyRL environment ready: $venv ($("$venv/bin/python" -c 'import importlib.metadata as m; print("skyrl", m.version("skyrl"), "transformers", m.version("transformers"))'))"
