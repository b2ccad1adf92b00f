"""The pipeline benchmark (benchmarks/pipeline.py) runs end to end at a small size: every stage,
the 1% append, a new scale and every reference produce a measurement. Timings are not judged here
(benchmarks, not timed tests): BENCHMARKS.md holds the numbers at 10K-100K rows."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.e2e


def run_script(script: str, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run a benchmarks/ script with this interpreter; fail the test with its output tail."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args],
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def test_harness_runs_at_a_small_size(tmp_path):
    if shutil.which("uv") is None:
        pytest.skip("uv is needed to build the HF datasets reference venv")
    skip = [] if (ROOT / ".venv-train" / "bin" / "python").is_file() else ["--skip", "lf"]
    out = tmp_path / "results.json"
    proc = run_script("pipeline.py", "--rows", "300", "--work", str(tmp_path / "work"), "--json", str(out), *skip,
                      timeout=900)
    result = json.loads(out.read_text())["results"][0]
    stages = ["ingest", "score", "dedup", "filter", "select", "export_sft"]
    assert [s["name"] for s in result["same_work"]] == stages
    assert [s["name"] for s in result["exact_first"]] == stages
    assert [s["name"] for s in result["exact_append"]] == stages
    refs = [s["name"] for s in result["references"]]
    assert any(r.startswith("floor: orjson") for r in refs) and any(r.startswith("floor: DuckDB") for r in refs)
    assert "HF datasets, num_proc=1" in refs and "HF datasets, num_proc=2" in refs
    if not skip:
        assert "LLaMA-Factory preprocessing, 2 workers" in refs
    assert all(s["wall_s"] > 0 and s["rss_mb"] > 0 for part in result.values() if isinstance(part, list) for s in part)
    assert "same work as the HF reference" in proc.stdout and "after a 1% append" in proc.stdout


def test_copies_run_the_same_input_as_several_sources(tmp_path):
    """--copies K: K sources over one input (K times the rows), every stage once, both ingests measured."""
    out = tmp_path / "results.json"
    run_script("pipeline.py", "--rows", "100", "--copies", "2", "--work", str(tmp_path / "work"), "--json", str(out))
    meta, (result,) = json.loads(out.read_text()).values()
    assert result["rows"] == 200 and result["copies"] == 2 and "references" not in result
    assert [s["name"] for s in result["same_work"]] == ["ingest ot", "ingest ot2", "score", "dedup", "filter", "select", "export_sft"]
    kept = json.loads((tmp_path / "work" / "same-work-100" / "metrics" / "filter.json").read_text())["total"]
    assert kept["in"] == 200 and meta["command"].endswith("--copies 2")

    # the filter's memory with an instant stand-in for the tokenizer, on the same project
    project = tmp_path / "work" / "same-work-100"
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["filter"].update(count_tokens=True, max_tokens=32768)
    (project / "params-exact.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    pool_before = sorted((p.name, p.read_bytes()) for p in (project / "lake" / "pool").iterdir())
    proc = run_script("filter_memory.py", "--params", str(project / "params-exact.yaml"))
    assert "high-water mark" in proc.stdout and "0 renderings counted before" in proc.stdout
    encoded = int(proc.stdout.split(" encoded (")[0].rsplit(" ", 1)[1].replace(",", ""))
    assert encoded > 0
    assert sorted((p.name, p.read_bytes()) for p in (project / "lake" / "pool").iterdir()) == pool_before


def test_view_benchmark_runs_at_a_small_size(tmp_path):
    """benchmarks/bench_view.py: a lake of 200 rows, every list, trajectory and search measurement."""
    out = tmp_path / "view.json"
    proc = run_script("bench_view.py", "--rows", "200", "--repeats", "2", "--work", str(tmp_path / "work"), "--json", str(out))
    result = json.loads(out.read_text())
    assert result["meta"]["rows"] == 200 and result["search"]["build_s"] > 0
    variants = {r["variant"] for r in result["results"]}
    assert {"no filter", "trajectory", "search"} <= variants and len(variants) == 6
    assert all(r["server"]["median_ms"] > 0 for r in result["results"])
    assert all(r["in_process"]["median_ms"] > 0 for r in result["results"] if r["variant"] not in ("search",)
               and not r["what"].startswith("walk"))
    assert "Every page under 300 ms" in proc.stdout
