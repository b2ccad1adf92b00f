"""DVC stage `export_sft@<scale>`: one scale's selection -> LLaMA-Factory sharegpt shards in
<lake>/exports/sft/<scale>/ (dataset_info.json names the dataset by its content id, sft-<N>-<12 hex>);
counts (in, out, rejected by reason, merged, trimmed) to metrics/export_sft/<scale>.json.

    python stages/export_sft.py SCALE [--params params.yaml]
"""

from __future__ import annotations

from pathlib import Path

from tracelake.errors import BadInput, BadParams
from tracelake.lake import (
    ShardWriter,
    TableWriter,
    output_dir,
    read_manifest,
    read_table,
    write_json,
    write_manifest,
)
from tracelake.lakedb import table_files
from tracelake.schema import load_schema
from tracelake.selection import dataset_label
from tracelake.sft_export import (
    TOKEN_RULE,
    SftStats,
    convert_batch,
    dataset_info,
    slots_with_messages,
    template_slots,
)
from tracelake.sharegpt import SHAREGPT_RULE
from tracelake.stage import run_stage, stage_args
from tracelake.tokenizer import load_tokenizer, tokenizer_fingerprint
from tracelake.ui import progress

BATCH = 256


def main(argv: list[str] | None = None) -> None:
    params, scale = stage_args(__doc__, argv, "scale")
    if scale not in params.select.scales:
        raise BadParams(f"params.yaml: no scale {scale!r} under select.scales")
    cfg, lake = params.export_sft, Path(params.lake)
    sel_dir = lake / "selections" / scale
    selection = read_manifest(sel_dir)
    slots = read_table(sel_dir, "selection").drop_columns(["score"]).to_pylist()
    trajectory_files = table_files(lake, "trajectories", list(params.sources))
    tokenizer, sft = load_tokenizer(cfg.tokenizer), params.train.sft
    template = template_slots(sft.template)
    stats = SftStats()

    out = lake / "exports" / "sft" / scale
    with output_dir(out) as tmp:
        shards = ShardWriter(tmp / "shards", load_schema("sft_rows"), cfg.rows_per_shard)
        rejects = TableWriter(tmp, load_schema("export_rejects"))
        total = selection["tables"]["selection"]["rows"]
        with progress(f"export_sft {scale}") as (set_total, advance):
            set_total(total)
            for batch in slots_with_messages(slots, trajectory_files, BATCH):
                rows, rejected = convert_batch(batch, same_role=cfg.same_role,
                                               cutoff_len=sft.cutoff_len, tokenizer=tokenizer, template=template,
                                               stats=stats)
                for row in rows:
                    shards.write(row)
                for row in rejected:
                    rejects.write(row)
                advance(len(batch))
        info, reject_info = shards.close(), rejects.close()
        assert stats.rows_in == stats.rows_out + sum(stats.rejected.values()) == total, "export accounting"
        if not info.rows:
            raise BadInput(f"export_sft {scale}: every one of {total} rows was rejected "
                           f"({', '.join(f'{k} {v}' for k, v in sorted(stats.rejected.items()))})")
        dataset_id = f"sft-{dataset_label(selection['params']['rows'])}-{info.version_id}"
        (tmp / "shards").rename(tmp / dataset_id)
        write_json(tmp / "dataset_info.json", dataset_info(dataset_id, shards.files))
        counts = {"dataset_id": dataset_id, "shards": len(shards.files), **stats.as_json()}
        write_manifest(
            tmp, kind="export_sft", dataset_id=dataset_id,
            tables=[info.with_file(f"{dataset_id}/"), reject_info],
            inputs={"selection": selection["version_id"], "selection_dataset": selection["dataset_id"],
                    "tokenizer": tokenizer_fingerprint(cfg.tokenizer)},
            params={"scale": scale, "export_sft": params.section("export_sft"),
                    "template": sft.template, "cutoff_len": sft.cutoff_len},
            formulas={"rows": SHAREGPT_RULE, "tokens": TOKEN_RULE},
            counts={**counts, "files": [f"{dataset_id}/{f}" for f in shards.files]})
    metrics = Path("metrics/export_sft") / f"{scale}.json"
    metrics.parent.mkdir(parents=True, exist_ok=True)
    write_json(metrics, counts)
    rej = ", ".join(f"{k} {v}" for k, v in sorted(stats.rejected.items())) or "none"
    print(f"export_sft {scale}: {dataset_id}: {stats.rows_out} of {stats.rows_in} rows in {len(shards.files)} "
          f"shard(s), rejected: {rej}; merged messages in {stats.rows_merged} rows -> {out}")


if __name__ == "__main__":
    run_stage(main)
