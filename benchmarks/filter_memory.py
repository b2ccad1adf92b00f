"""Peak memory of the filter's exact token counting, without waiting for the tokenizer.

    uv run python benchmarks/filter_memory.py [--params params.yaml]

Runs the filter's rules (tracelake.curate.filter.run_filters) over a project's ingested lake as a
first run does: an empty token cache (a temporary directory), every conversation rendered and cut
into segments, every segment looked up, added and written to the cache. Only the tokenizer's
`encode_batch_fast` is replaced, by a stand-in that answers at once (len(text) // 4 ids a text), so
the 30 minutes of encoding 100K real-sized traces take about 100 s while every other allocation is
the real one. Nothing is written into the project. Prints the wall time, the counting summary and
the process's high-water mark (VmHWM). Make a 100K-row project with
`uv run python benchmarks/pipeline.py --rows 100000` (its exact-100000 directory), or use the sample's.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from tracelake.core.duckdb_views import connect
from tracelake.curate.filter import run_filters
from tracelake.params import load_params
from tracelake.tokens import token_count
from tracelake.tokens.rendering import Rendering


class InstantEncoder:
    """Stands in for a tokenizers.Tokenizer: `len(text) // 4` ids a text, computed at once."""

    def encode_batch_fast(self, texts: list[str], add_special_tokens: bool = False) -> list[range]:
        return [range(len(text) // 4) for text in texts]


def high_water_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--params", default="params.yaml", help="the project's params.yaml (paths relative to its directory)"
    )
    args = ap.parse_args()
    params_path = Path(args.params).resolve()
    os.chdir(params_path.parent)
    params = load_params(params_path)
    if not params.filter.count_tokens:
        raise SystemExit("filter.count_tokens is false in these params: there is nothing to count")

    real_open = token_count.TokenCounter.open

    def open_instant(path, cache_dir=None):
        counter = real_open(path, cache_dir)
        counter.tokenizer = InstantEncoder()
        return counter

    token_count.TokenCounter.open = staticmethod(open_instant)
    sources = list(params.sources)
    with tempfile.TemporaryDirectory() as cache:
        con = connect(params.lake, sources, tables=("trajectories",))
        start = time.perf_counter()
        rendering = Rendering.of(params.train.sft, params.export_sft.same_role)  # as the filter stage passes it
        result = run_filters(con, params.filter, sources=sources, token_cache=Path(cache), rendering=rendering)
        wall = time.perf_counter() - start
    print(f"filter rules with instant encoding: {wall:.1f} s wall, high-water mark {high_water_mb():,.0f} MB")
    print(f"counting: {result.token_stats.summary()}")


if __name__ == "__main__":
    main()
