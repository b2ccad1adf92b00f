"""DVC stage `export_sft@<scale>`: one scale's selection -> LLaMA-Factory sharegpt shards in
<lake>/exports/sft/<scale>/ (dataset_info.json names the dataset by its content id, sft-<N>-<12 hex>);
counts (in, out, rejected by reason, merged, trimmed) to metrics/export_sft/<scale>.json.

    python stages/export_sft.py SCALE [--params params.yaml]
"""

from __future__ import annotations

from pathlib import Path

from tracelake.core.errors import BadParams
from tracelake.core.layout import Lake
from tracelake.core.stage import run_stage, write_metrics
from tracelake.export.sft import export_sft
from tracelake.params import stage_args


def main(argv: list[str] | None = None) -> None:
    params, scale = stage_args(__doc__, argv, "scale")
    if scale not in params.select.scales:
        raise BadParams(f"params.yaml: no scale {scale!r} under select.scales")
    lake, sft = Lake(params.lake), params.train.sft
    counts = export_sft(lake, scale, list(params.sources), params.export_sft, sft,
                        params={"scale": scale, "export_sft": params.section("export_sft"),
                                "template": sft.template, "cutoff_len": sft.cutoff_len},
                        token_cache=Path(params.tokenizer.cache))
    token_counts = counts.pop("token_counts")
    write_metrics(f"metrics/export_sft/{scale}.json", counts)
    rej = ", ".join(f"{k} {v}" for k, v in sorted(counts["rejected"].items())) or "none"
    print(f"export_sft {scale}: {counts['dataset_id']}: {counts['rows_out']} of {counts['rows_in']} rows in "
          f"{counts['shards']} shard(s), rejected: {rej}; merged messages in {counts['rows_merged']} rows "
          f"-> {lake.sft_export(scale)}")
    if token_counts:
        print(f"export_sft {scale}: token counts: {token_counts}")
    if not counts["length_checked"]:
        print(f"export_sft {scale}: rows were not length-checked (export_sft.count_tokens: false): LLaMA-Factory "
              f"cuts any row longer than cutoff_len {sft.cutoff_len} silently")


if __name__ == "__main__":
    run_stage(main)
