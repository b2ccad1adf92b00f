#!/usr/bin/env bash
# The GPU checks, for a lent GPU machine without network (tests/gpu/README.md says what each proves):
#
#   bash tests/gpu/device_checks.sh [SFT_EXPORT_DIR]          (default lake/exports/sft/316)
#
#   1 lf      LLaMA-Factory full SFT, 30 bf16 steps of a tiny random Qwen3 on the SFT export (lf_check.py)
#   2 score   the transformers model scorer on CUDA, 50 task instructions (score_check.py)
#   3 ingest  trace-table ingest at 1, 4 and 16 worker processes, 20K synthetic rows (ingest_scaling.py)
#   4 tokens  the filter's exact token counting, one process against 4 and 16 (token_scaling.py); not in
#             the default set: it needs polars ($GPU_WHEELS/tokens/, 55 MB), which does not fit one call
#             beside the other groups: run it in a call of its own, GPU_CHECKS=tokens
#
# Each check runs on its own, under its own time limit: one failing never stops the next. Each prints
# one PASS/FAIL line; logs and JSON land in $OUT (default ./gpu-out), all of it summed up in
# $OUT/summary.json. Nothing large is written to $OUT (the ingest corpus lives in /tmp).
#
# Packages the machine lacks are carried as wheels, one folder per check group, each installed into
# its own --target folder so that they shadow the machine's only for the checks that need them:
#   $GPU_WHEELS/lf/    LLaMA-Factory 0.9.5 and the versions the project pins for it (training/constraints.txt)
#   $GPU_WHEELS/core/  tracelake's curation engines (duckdb, pydantic, orjson; pyproject.toml pins)
#   $GPU_WHEELS/tokens/ polars and orjson, for check 4 alone (its own call)
# A folder with no wheels means "use the machine's packages" (a machine with everything installed).
#
# Environment: OUT, GPU_PYTHON (python3), GPU_WHEELS (.whl), GPU_SITE (/tmp/gpu-site),
#   GPU_CHECKS (lf,score,ingest), GPU_CPU_SMOKE=1 (each check's --cpu-smoke form: no GPU needed),
#   GPU_EXPORT (the export, when no argument), GPU_LF_STEPS (30), GPU_SCORE_N (50), GPU_INGEST_ROWS (20000),
#   GPU_INGEST_WORKERS (1,4,16), GPU_TOKENIZER (data/tokenizer; the Qwen-style benchmark tokenizer is what
#   was measured), GPU_TOKEN_ROWS (1500), GPU_TOKEN_WORKERS (local,4,16).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
root=$PWD
OUT=${OUT:-$root/gpu-out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
export OUT
export_dir=${1:-${GPU_EXPORT:-lake/exports/sft/316}}
py=${GPU_PYTHON:-python3}
wheels=${GPU_WHEELS:-.whl}
site=${GPU_SITE:-/tmp/gpu-site}
checks=",${GPU_CHECKS:-lf,score,ingest},"
smoke=()
[[ ${GPU_CPU_SMOKE:-0} == 1 ]] && smoke=(--cpu-smoke)
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export HF_HOME=/tmp/gpu-hf-home
started=$SECONDS
echo "device checks: export $export_dir, python $(command -v "$py"), wheels $wheels, out $OUT"

# The machine, before anything is installed.
"$py" - >"$OUT/env.json" 2>"$OUT/env.log" <<'PY'
import importlib.metadata as md, json, os, platform, shutil, subprocess, sys
names = ["torch", "transformers", "accelerate", "peft", "tokenizers", "huggingface-hub", "pyarrow", "numpy",
         "pandas", "fsspec", "datasets", "trl", "llamafactory", "duckdb", "pydantic", "orjson", "torchaudio",
         "torchvision", "vllm", "typing-extensions", "safetensors", "xxhash", "pyyaml"]
versions = {}
for n in names:
    try:
        versions[n] = md.version(n)
    except md.PackageNotFoundError:
        versions[n] = None
env = {"python": sys.version.split()[0], "executable": sys.executable, "platform": platform.platform(),
       "cpus": len(os.sched_getaffinity(0)), "packages": versions}
try:
    env["mem_gib"] = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
except (ValueError, OSError):
    pass
if shutil.which("nvidia-smi"):
    q = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                       capture_output=True, text=True)
    env["gpus"] = [line.strip() for line in q.stdout.splitlines() if line.strip()]
try:
    import torch
    env["torch_cuda"] = {"available": torch.cuda.is_available(), "cuda": torch.version.cuda,
                         "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
except Exception as exc:
    env["torch_cuda"] = {"error": f"{type(exc).__name__}: {exc}"}
print(json.dumps(env, indent=2))
PY
"$py" -c 'import json,sys; e=json.load(open(sys.argv[1])); print("machine:", e.get("gpus"), e["cpus"], "CPUs, python", e["python"], "torch", e["packages"]["torch"], "transformers", e["packages"]["transformers"], "pyarrow", e["packages"]["pyarrow"], "cuda", e.get("torch_cuda"))' "$OUT/env.json" || echo "machine: see $OUT/env.log"

# Wheels -> $site/<group>; prints the PYTHONPATH entries of that group.
declare -A group_path
install_group() {
  local group=$1 target="$site/$1" t0=$SECONDS
  shopt -s nullglob
  local files=("$wheels/$group"/*.whl)
  shopt -u nullglob
  if (( ${#files[@]} == 0 )); then
    echo "install $group: no wheels in $wheels/$group, the machine's packages are used"
    group_path[$group]=""
    return 0
  fi
  rm -rf "$target"
  if "$py" -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile --no-cache-dir \
      --upgrade --target "$target" "${files[@]}" >"$OUT/install-$group.log" 2>&1; then
    echo "install $group: ${#files[@]} wheels in $((SECONDS - t0)) s -> $target"
    group_path[$group]=$target
  else
    echo "install $group: FAILED (see install-$group.log):"; tail -n 5 "$OUT/install-$group.log"
    group_path[$group]=$target
    return 1
  fi
}

# run_check NAME LIMIT_S PYTHONPATH COMMAND...: the check's output in $OUT/NAME.log, its PASS/FAIL line here.
declare -A rc_of
run_check() {
  local name=$1 limit=$2 path=$3 t0=$SECONDS rc line
  shift 3
  echo "--- $name (limit ${limit} s)"
  PYTHONPATH="$path" timeout -k 10 "$limit" "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  rc_of[$name]=$rc
  line=$(grep -E "^(PASS|FAIL) " "$OUT/$name.log" | tail -n 1)
  if [[ -n $line ]]; then
    echo "$line"
  else
    echo "FAIL $name: exited $rc after $((SECONDS - t0)) s without a result$( ((rc == 124 || rc == 137)) && echo " (time limit)")"
  fi
  if (( rc != 0 )); then
    echo "    last lines of $name.log:"; tail -n 12 "$OUT/$name.log" | cut -c1-300 | sed 's/^/    | /'
  fi
  echo "    ($((SECONDS - t0)) s)"
}

if [[ $checks == *,lf,* ]]; then
  install_group lf
  lf_path=${group_path[lf]}
  # LLaMA-Factory 0.9.5 imports torchaudio at start-up (needed only for audio data): a placeholder
  # when the machine has none that imports.
  if ! PYTHONPATH="$lf_path" "$py" -c "import torchaudio" >/dev/null 2>&1; then
    echo "torchaudio does not import here: LLaMA-Factory gets the placeholder in tests/gpu/stubs"
    lf_path="$lf_path:$root/tests/gpu/stubs"
  fi
  run_check lf_check "${GPU_LF_LIMIT:-200}" "$lf_path" "$py" tests/gpu/lf_check.py --export "$export_dir" \
    --out "$OUT" --steps "${GPU_LF_STEPS:-$([[ ${#smoke[@]} -gt 0 ]] && echo 3 || echo 30)}" --timeout 150 "${smoke[@]}"
fi

if [[ $checks == *,tokens,* ]]; then
  # Polars, orjson and src/ only: no DuckDB (check 4 does not import it), the machine's tokenizers and numpy.
  install_group tokens
  tokens_path="${group_path[tokens]:+${group_path[tokens]}:}$root/src"
  run_check token_scaling "${GPU_TOKEN_LIMIT:-240}" "$tokens_path" "$py" tests/gpu/token_scaling.py --out "$OUT" \
    --tokenizer "${GPU_TOKENIZER:-data/tokenizer}" \
    --rows "${GPU_TOKEN_ROWS:-$([[ ${#smoke[@]} -gt 0 ]] && echo 300 || echo 1500)}" \
    --workers "${GPU_TOKEN_WORKERS:-$([[ ${#smoke[@]} -gt 0 ]] && echo local,2 || echo local,4,16)}" --budget-s 180 "${smoke[@]}"
fi

if [[ $checks == *,score,* || $checks == *,ingest,* ]]; then
  install_group core
  core_path="${group_path[core]:+${group_path[core]}:}$root/src"
fi

if [[ $checks == *,score,* ]]; then
  # The scorer (tracelake, duckdb, pydantic) and its worker (torch + the machine's transformers) both
  # run in $py; the worker inherits the core group's PYTHONPATH, which holds no torch or transformers.
  run_check score_check "${GPU_SCORE_LIMIT:-120}" "$core_path" "$py" tests/gpu/score_check.py --out "$OUT" \
    --n "${GPU_SCORE_N:-$([[ ${#smoke[@]} -gt 0 ]] && echo 5 || echo 50)}" --worker-python "$(command -v "$py")" "${smoke[@]}"
fi

if [[ $checks == *,ingest,* ]]; then
  run_check ingest_scaling "${GPU_INGEST_LIMIT:-120}" "$core_path" "$py" tests/gpu/ingest_scaling.py --out "$OUT" \
    --rows "${GPU_INGEST_ROWS:-$([[ ${#smoke[@]} -gt 0 ]] && echo 400 || echo 20000)}" \
    --workers "${GPU_INGEST_WORKERS:-$([[ ${#smoke[@]} -gt 0 ]] && echo 1,2 || echo 1,4,16)}" --budget-s 80 "${smoke[@]}"
fi

"$py" - "$OUT" "$((SECONDS - started))" <<'PY'
import json, sys
from pathlib import Path
out, wall = Path(sys.argv[1]), int(sys.argv[2])
summary = {"wall_s": wall, "checks": {}}
env = out / "env.json"
if env.is_file() and env.stat().st_size:
    summary["machine"] = json.loads(env.read_text())
for name in ("lf_check", "score_check", "ingest_scaling", "token_scaling"):
    f = out / f"{name}.json"
    log = out / f"{name}.log"
    if f.is_file():
        summary["checks"][name] = json.loads(f.read_text())
    elif log.is_file():
        summary["checks"][name] = {"status": "FAIL", "error": "no result (killed or crashed): see " + log.name}
(out / "summary.json").write_text(json.dumps(summary, indent=2))
states = {k: v.get("status") for k, v in summary["checks"].items()}
print(f"=== summary ({wall} s): " + ", ".join(f"{k} {v}" for k, v in states.items()) + f"; {out / 'summary.json'}")
PY
for name in "${!rc_of[@]}"; do (( rc_of[$name] != 0 )) && exit 1; done
exit 0
