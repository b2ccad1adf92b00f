"""`tracelake train sft|rl`: resolve a dataset, plan the run (plan.py), check it (check.py), print it
(--dry-run) or start it (run.py).

- local: `llamafactory-cli train training/configs/sft-<scale>.yaml [key=value ...]` from the training
  environment (TRACELAKE_TRAIN_ENV, else .venv-train, else PATH; `bash training/setup-env.sh`), or
  `python -m <SkyRL entrypoint> key=value ...` from the environment of rl.yaml's trainer: skyrl 0.4
  in the SkyRL environment (.venv-skyrl; `bash training/setup-skyrl-env.sh`), skyrl-train 0.3.x in
  the training environment (core/envs.py).
- modal: `modal run training/modal_app.py::sft|rl`: the export directory goes to a Modal volume
  under its content id (skipped when the id is already there, so an unchanged dataset is never
  uploaded twice), and a GPU function runs the same trainer with paths rewritten to the volumes.

A `--set` that would change which data trains or how it becomes tokens is refused first, in one line
(export/set_keys.py, on every planner); any other goes to the trainer, written so that its command
line reads back exactly the value given.

Before an SFT run starts (and in --dry-run), training/check_sft_config.py parses the config with the
`--set` overrides by LLaMA-Factory's own argument parser, in the training environment (`check_sft`):
an unknown key is refused in one line. An SFT run's directory is runs/<dataset id>/<run hash>
(train_config.run_dir: the training keys after --set, and the GPUs): a run started again resumes
from its last checkpoint (LLaMA-Factory does when overwrite_output_dir is not set), a finished one
is refused. train.sft.report_to `auto` is decided here: wandb when WANDB_API_KEY is set.

Before an RL run starts (and in --dry-run), training/check_rl_config.py checks every override against
the installed SkyRL's own config, in that trainer's environment (`check_rl`), and the dataset must
hold at least one training batch (`check_batch`). Route harbor (rl.yaml `route`) runs SkyRL's Harbor
entrypoint from the SkyRL checkout named by train.rl.skyrl_checkout (put on PYTHONPATH); without one
the dry run says so (`blocked:`) and a run is refused.

A plan holds no credentials: Modal reads its token from the environment (MODAL_TOKEN_ID/SECRET) or
its own config, and the names in FORWARDED_ENV travel as a Modal secret built from the local
environment at run time. Dry runs print names and whether they are set, never values.
"""
