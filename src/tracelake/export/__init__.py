"""Export: datasets -> training data and the runs that train on it.

- sharegpt.py      messages -> LLaMA-Factory sharegpt rows (rule sharegpt_v1)
- templates.py     LLaMA-Factory chat templates, as their token counts need them
- sft.py           one scale's selection -> sharegpt shards + dataset_info.json (export_sft)
- rl.py            tasks -> SkyRL PromptDataset + Harbor task table (export_rl)
- train_config.py  LLaMA-Factory and SkyRL configs from params (train_config)
- launch/        `tracelake train`: plan (local or Modal), check, run or dry-run
- params.py        params.yaml `export_sft`, `export_rl`, `train`
"""
