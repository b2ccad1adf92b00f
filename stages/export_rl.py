"""DVC stage `export_rl`: the tasks of export_rl.sources -> SkyRL RL data in <lake>/exports/rl/: PromptDataset
shards (prompts/), the Harbor task table (tasks/), rejects and a manifest naming the dataset by its
content id, rl-<tasks>-<12 hex>; counts (in, out, rejected by reason) to metrics/export_rl.json.

    python stages/export_rl.py [--params params.yaml]
"""

from __future__ import annotations

from pathlib import Path

from tracelake.errors import BadInput
from tracelake.lake import ShardWriter, TableWriter, output_dir, write_json, write_manifest
from tracelake.lakedb import connect, input_versions
from tracelake.rl_export import PROMPT_RULE, TASK_COLUMNS, RlSettings, RlStats, convert_batch
from tracelake.schema import load_schema
from tracelake.selection import dataset_label
from tracelake.stage import run_stage, stage_args
from tracelake.tokenizer import load_tokenizer, tokenizer_fingerprint
from tracelake.ui import progress

BATCH = 64  # task_binary values can be megabytes each
ROWS = f"SELECT {', '.join(TASK_COLUMNS)} FROM tasks ORDER BY source, name, task_id"


def main(argv: list[str] | None = None) -> None:
    params = stage_args(__doc__, argv)[0]
    cfg, lake = params.export_rl, Path(params.lake)
    sources = list(params.sources) if cfg.sources == "all" else list(cfg.sources)
    con = connect(lake, sources, tables=("tasks",))
    total = con.execute("SELECT count(*) FROM tasks").fetchall()[0][0]
    tokenizer = load_tokenizer(cfg.tokenizer)
    settings = RlSettings(env_class=cfg.env_class, reward_method=cfg.reward_method, system_prompt=cfg.system_prompt,
                          max_turns=cfg.max_turns, max_prompt_length=cfg.max_prompt_length)
    stats = RlStats()

    out = lake / "exports" / "rl"
    with output_dir(out) as tmp:
        prompts = ShardWriter(tmp / "prompts", load_schema("rl_prompts"), cfg.rows_per_shard)
        harbor = ShardWriter(tmp / "tasks", load_schema("harbor_tasks"), cfg.rows_per_shard,
                             row_group_size=BATCH)
        rejects = TableWriter(tmp, load_schema("export_rejects"))
        with progress("export_rl") as (set_total, advance):
            set_total(total)
            for batch in con.sql(ROWS).to_arrow_reader(BATCH):
                rows, tasks, rejected = convert_batch(batch.to_pylist(), settings, tokenizer, stats)
                for prompt, task in zip(rows, tasks):
                    prompts.write(prompt)
                    harbor.write(task)
                for row in rejected:
                    rejects.write(row)
                advance(batch.num_rows)
        info, task_info, reject_info = prompts.close(), harbor.close(), rejects.close()
        assert stats.tasks_in == stats.tasks_out + sum(stats.rejected.values()) == total, "export accounting"
        assert info.rows == task_info.rows == stats.tasks_out and prompts.files == harbor.files, "export shards"
        if not info.rows:
            raise BadInput(f"export_rl: every one of {total} tasks was rejected ({dict(stats.rejected)}); "
                           f"see {out}/export_rejects.parquet")
        dataset_id = f"rl-{dataset_label(stats.tasks_out)}-{info.version_id}"
        files = {"prompts": [f"prompts/{f}" for f in prompts.files], "tasks": [f"tasks/{f}" for f in harbor.files]}
        counts = {"dataset_id": dataset_id, "shards": len(prompts.files), **stats.as_json(), "files": files}
        write_manifest(
            tmp, kind="export_rl", dataset_id=dataset_id,
            tables=[info.with_file("prompts/"), task_info.with_file("tasks/"), reject_info],
            inputs={"tasks": input_versions(lake, "tasks", sources), "tokenizer": tokenizer_fingerprint(cfg.tokenizer)},
            params=params.section("export_rl"),
            formulas={"prompts": PROMPT_RULE},
            counts=counts)
    metrics = Path("metrics/export_rl.json")
    metrics.parent.mkdir(parents=True, exist_ok=True)
    write_json(metrics, counts)
    rej = ", ".join(f"{k} {v}" for k, v in stats.as_json()["rejected"].items() if v) or "none"
    print(f"export_rl: {dataset_id}: {stats.tasks_out} of {stats.tasks_in} tasks from {len(sources)} source(s) in "
          f"{len(prompts.files)} shard(s), rejected: {rej} -> {out}")


if __name__ == "__main__":
    run_stage(main)
