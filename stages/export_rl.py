"""DVC stage `export_rl`: the tasks of export_rl.sources -> SkyRL RL data in <lake>/exports/rl/: PromptDataset
shards (prompts/), the Harbor task table (tasks/), rejects and a manifest naming the dataset by its
content id, rl-<tasks>-<12 hex>; counts (in, out, rejected by reason) to metrics/export_rl.json.

    python stages/export_rl.py [--params params.yaml]
"""

from __future__ import annotations

from tracelake.core.layout import Lake
from tracelake.core.stage import run_stage, write_metrics
from tracelake.export.rl import RlSettings, export_rl
from tracelake.params import stage_args


def main(argv: list[str] | None = None) -> None:
    params = stage_args(__doc__, argv)[0]
    cfg, lake = params.export_rl, Lake(params.lake)
    sources = list(params.sources) if cfg.sources == "all" else list(cfg.sources)
    settings = RlSettings(env_class=cfg.env_class, reward_method=cfg.reward_method, system_prompt=cfg.system_prompt,
                          max_turns=cfg.max_turns, max_prompt_length=cfg.max_prompt_length,
                          without_binary=cfg.without_binary)
    counts = export_rl(lake, sources, settings, tokenizer_path=cfg.tokenizer, rows_per_shard=cfg.rows_per_shard,
                       params=params.section("export_rl"))
    write_metrics("metrics/export_rl.json", counts)
    rej = ", ".join(f"{k} {v}" for k, v in counts["rejected"].items() if v) or "none"
    print(f"export_rl: {counts['dataset_id']}: {counts['tasks_out']} of {counts['tasks_in']} tasks from "
          f"{len(sources)} source(s) in {counts['shards']} shard(s), rejected: {rej} -> {lake.rl_export}")
    if counts["prompt_only"]:
        print(f"export_rl: {counts['prompt_only']} prompts have no task binary (tasks derived from trace tables), "
              f"hence no row in the task table: their environment must come from elsewhere "
              f"(export_rl.without_binary: reject leaves them out)")


if __name__ == "__main__":
    run_stage(main)
