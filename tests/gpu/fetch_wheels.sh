#!/usr/bin/env bash
# Download the wheels tests/gpu/device_checks.sh carries to a GPU machine without network, for its
# python (default: CPython 3.12, manylinux x86_64):
#
#   bash tests/gpu/fetch_wheels.sh [DIR] [PYTHON_VERSION]        (default .whl 3.12; about 46 MB)
#
#   DIR/lf/    LLaMA-Factory 0.9.5 and what it needs beyond a torch + transformers machine, at the versions
#              the project pins (training/constraints.txt): transformers 4.57.6 (LLaMA-Factory 0.9.5 caps
#              transformers at 5.6.0), tokenizers 0.22.2 and huggingface_hub 0.36.2 (what transformers
#              4.57.6 accepts), datasets 4.0.0, trl 0.24.0, accelerate 1.11.0, peft 0.18.1, ...
#   DIR/core/  tracelake's curation engines (pyproject.toml / uv.lock pins): duckdb, pydantic, orjson.
#   DIR/tokens/ check 4 alone (GPU_CHECKS=tokens, in a call of its own: 55 MB): polars, orjson.
#
# Not carried: pyarrow (26.0.1 is a 52.5 MiB wheel: the machine's pyarrow is used), torch, numpy, pandas
# (the machine's). antlr4-python3-runtime 4.9.3 (omegaconf's, which LLaMA-Factory imports) exists only
# as a source archive: it is built here into a pure-Python wheel.
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-.whl}
pyver=${2:-3.12}
download=(python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all:
          --python-version "$pyver" --implementation cp --platform manylinux_2_28_x86_64
          --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
LF=(llamafactory==0.9.5 transformers==4.57.6 datasets==4.0.0 trl==0.24.0 accelerate==1.11.0 peft==0.18.1
    tokenizers==0.22.2 huggingface_hub==0.36.2 dill==0.3.8 multiprocess==0.70.16 fsspec==2025.3.0 omegaconf==2.3.0)
CORE=(duckdb==2.0.0 orjson==3.13.0 pydantic==2.14.3 pydantic-core==2.50.4 annotated-types==0.8.0
      typing-inspection==0.4.5 typing-extensions==4.16.0)
TOKENS=(polars==2.1.0 polars-runtime-32==2.1.0 orjson==3.13.0)
rm -rf "$dir/lf" "$dir/core" "$dir/tokens"
mkdir -p "$dir/lf" "$dir/core" "$dir/tokens"
"${download[@]}" -d "$dir/lf" "${LF[@]}"
python3 -m pip wheel -q --disable-pip-version-check --no-deps -w "$dir/lf" antlr4-python3-runtime==4.9.3
"${download[@]}" -d "$dir/core" "${CORE[@]}"
"${download[@]}" -d "$dir/tokens" "${TOKENS[@]}"
# Check 4's group is carried alone (it does not fit beside the others): carry DIR/tokens, not DIR.
mkdir -p "$dir-tokens" && rm -rf "$dir-tokens/tokens" && mv "$dir/tokens" "$dir-tokens/tokens"
du -sb "$dir/lf"; du -sb "$dir/core"; du -sb "$dir"; du -sb "$dir-tokens"
