"""params.yaml -> typed, checked configuration. Unknown keys and bad values fail before any work,
with one line naming the key.

Each stage reads only its own sections; the resolved section is what its manifest records.
"""

from __future__ import annotations

import math
import re
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from .errors import BadParams

FORMATS = ("harbor", "traces")
EPISODES = ("last", "all")
_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
_SCORER = re.compile(r"^[a-z0-9_]+_v[0-9]+$")


@dataclass(frozen=True)
class SynthParams:
    seed: int = 0
    trials: int = 2000
    tasks: int = 300
    out: str = "data/sample"


@dataclass(frozen=True)
class SourceParams:
    format: str
    path: str
    tasks: str


@dataclass(frozen=True)
class IngestParams:
    strict: bool = False


@dataclass(frozen=True)
class TokenizerParams:
    vocab_size: int = 4096
    out: str = "data/tokenizer"


@dataclass(frozen=True)
class ImportParams:
    """A column of precomputed scores in a user's own Parquet file, imported as a scorer."""
    path: str
    score: str                    # column holding the score
    task: str | None = None       # column holding task names (matched on the base name)
    task_id: str | None = None    # or: column holding tracelake task ids
    source: str | None = None     # optional column restricting a name to one source
    model: str | None = None      # recorded in the scores table


@dataclass(frozen=True)
class ScoreParams:
    scorers: list = field(default_factory=lambda: ["response_length_proxy_v1"])
    imports: dict = field(default_factory=dict)
    cache: str = ".tracelake/cache/scores"


@dataclass(frozen=True)
class FilterParams:
    timeout_exceptions: list = field(default_factory=lambda: ["AgentTimeoutError"])
    drop_subagents: bool = True
    episodes: str = "last"
    min_assistant_turns: int = 5
    success_only: bool = False
    max_tokens: int | None = None
    tokenizer: str = "data/tokenizer"   # an HF tokenizer directory: n_tokens for max_tokens and reports
    dedup_conversations: bool = True


@dataclass(frozen=True)
class MixParams:
    sources: Any = "all"          # "all" or a list of source names
    weights: dict = field(default_factory=dict)
    top_k: int | None = None


@dataclass(frozen=True)
class SelectParams:
    score: str = "response_length_proxy_v1"
    scales: dict = field(default_factory=lambda: {"316": 316, "1k": 1000, "3k": 3160, "10k": 10000})


@dataclass(frozen=True)
class ExportSftParams:
    rows_per_shard: int = 5000
    same_role: str = "merge"          # consecutive same-side messages: merge | reject
    tokenizer: str = "data/tokenizer"


@dataclass(frozen=True)
class ExportRlParams:
    sources: Any = "all"              # "all" or a list of source names
    env_class: str = "harbor"
    reward_method: str = "rule"
    system_prompt: str | None = None
    max_turns: int = 32
    max_prompt_length: int = 8192     # longer prompts are rejected (SkyRL would drop them silently)
    rows_per_shard: int = 5000
    tokenizer: str = "data/tokenizer"


@dataclass(frozen=True)
class SftTrainParams:
    """LLaMA-Factory full SFT (the seed recipe). `extra` passes any other LLaMA-Factory key as-is."""
    model: str = "Qwen/Qwen3-8B"
    template: str = "qwen3"
    cutoff_len: int = 32768           # export_sft rejects longer examples (LLaMA-Factory would cut them)
    finetuning_type: str = "full"
    learning_rate: float = 4.0e-5
    lr_scheduler_type: str = "cosine"
    warmup_ratio: float = 0.1
    num_train_epochs: float = 7.0
    per_device_train_batch_size: int = 1
    gradient_accumulation_steps: int = 2
    gpus: int = 8
    optim: str = "adamw_torch_fused"
    adam_beta1: float = 0.9
    adam_beta2: float = 0.98
    adam_epsilon: float = 1.0e-8
    weight_decay: float = 0.0
    seed: int = 42
    bf16: bool = True
    deepspeed: str | None = "training/deepspeed/ds_z3_config.json"
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class RlTrainParams:
    """SkyRL (skyrl_train entrypoint, GRPO). `extra` passes any other SkyRL config key as-is."""
    model: str = "Qwen/Qwen3-8B"
    entrypoint: str = "skyrl_train.entrypoints.main_base"
    advantage_estimator: str = "grpo"
    n_samples_per_prompt: int = 8
    epochs: int = 1
    train_batch_size: int = 32
    learning_rate: float = 1.0e-6
    gpus: int = 8
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class ModalParams:
    app: str = "tracelake-train"
    sft_gpu: str = "H100:8"
    rl_gpu: str = "H100:8"
    timeout_hours: int = 24
    datasets_volume: str = "tracelake-datasets"   # shards, uploaded once per content id
    runs_volume: str = "tracelake-runs"           # checkpoints and logs
    image_python: str = "3.11"


@dataclass(frozen=True)
class TrainParams:
    configs: str = "training/configs"
    runs: str = "runs"
    sft: SftTrainParams = field(default_factory=SftTrainParams)
    rl: RlTrainParams = field(default_factory=RlTrainParams)
    modal: ModalParams = field(default_factory=ModalParams)


@dataclass(frozen=True)
class Params:
    lake: str
    synth: SynthParams
    ingest: IngestParams
    sources: dict[str, SourceParams]
    tokenizer: TokenizerParams
    score: ScoreParams
    filter: FilterParams
    mix: MixParams
    select: SelectParams
    export_sft: ExportSftParams = field(default_factory=ExportSftParams)
    export_rl: ExportRlParams = field(default_factory=ExportRlParams)
    train: TrainParams = field(default_factory=TrainParams)

    def section(self, name: str) -> dict[str, Any]:
        """One section as plain data (what a stage's manifest records)."""
        value = getattr(self, name)
        if name == "sources":
            return {k: asdict(v) for k, v in value.items()}
        return asdict(value) if hasattr(value, "__dataclass_fields__") else value


_TOP = ("lake", "synth", "ingest", "sources", "tokenizer", "score", "filter", "mix", "select",
        "export_sft", "export_rl", "train")


def _type_ok(value: Any, expected: str) -> bool:
    if expected.endswith(" | None"):
        return value is None or _type_ok(value, expected[: -len(" | None")])
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if expected == "float":
        return (is_int or isinstance(value, float)) and math.isfinite(value)
    return {"int": is_int, "bool": isinstance(value, bool), "str": isinstance(value, str),
            "list": isinstance(value, list), "dict": isinstance(value, dict)}.get(expected, True)


def _build(cls, data: Any, where: str):
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise BadParams(f"params.yaml: {where} must be a mapping")
    known = {f.name: f for f in fields(cls)}
    for key in data:
        if key not in known:
            raise BadParams(f"params.yaml: unknown key {where}.{key} (known: {', '.join(known)})")
    values = {}
    for name, f in known.items():
        if name not in data:
            if f.default is MISSING and f.default_factory is MISSING:
                raise BadParams(f"params.yaml: {where}.{name} is required")
            continue
        value, expected = data[name], f.type
        if not _type_ok(value, expected):
            raise BadParams(f"params.yaml: {where}.{name} must be {expected.replace(' | None', ' or null')}, "
                            f"got {value!r}")
        values[name] = value
    return cls(**values)


def _check_name(name: Any, where: str) -> None:
    if not isinstance(name, str) or not _NAME.match(name):
        raise BadParams(f"params.yaml: {where} name {name!r} must be letters, digits, '-' or '_'")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check_score(score: ScoreParams) -> None:
    from .scoring import BUILTIN_SCORERS

    for name in score.scorers:
        if not isinstance(name, str) or name not in BUILTIN_SCORERS:
            raise BadParams(f"params.yaml: score.scorers: unknown scorer {name!r} "
                            f"(built in: {', '.join(BUILTIN_SCORERS)}; import others under score.imports)")
    for name, raw in score.imports.items():
        if not isinstance(name, str) or not _SCORER.match(name):
            raise BadParams(f"params.yaml: score.imports.{name}: a scorer name is snake_case ending in a "
                            f"version, e.g. difficulty_v1")
        if name in BUILTIN_SCORERS:
            raise BadParams(f"params.yaml: score.imports.{name} shadows a built-in scorer")
        imp = _build(ImportParams, raw, f"score.imports.{name}")
        if (imp.task is None) == (imp.task_id is None):
            raise BadParams(f"params.yaml: score.imports.{name} needs exactly one of task (a column of task "
                            f"names) or task_id (a column of task ids)")


def _check_filter(flt: FilterParams) -> None:
    if not all(isinstance(x, str) and x for x in flt.timeout_exceptions):
        raise BadParams("params.yaml: filter.timeout_exceptions must be a list of exception names")
    if flt.episodes not in EPISODES:
        raise BadParams(f"params.yaml: filter.episodes must be one of {', '.join(EPISODES)}, got {flt.episodes!r}")
    if flt.min_assistant_turns < 0:
        raise BadParams(f"params.yaml: filter.min_assistant_turns must be >= 0, got {flt.min_assistant_turns}")
    if flt.max_tokens is not None and flt.max_tokens < 1:
        raise BadParams(f"params.yaml: filter.max_tokens must be >= 1 or null, got {flt.max_tokens}")


def _check_mix(mix: MixParams, sources: dict[str, SourceParams]) -> None:
    if mix.sources != "all":
        if not isinstance(mix.sources, list) or not mix.sources:
            raise BadParams("params.yaml: mix.sources must be \"all\" or a non-empty list of source names")
        for name in mix.sources:
            if not isinstance(name, str) or name not in sources:
                raise BadParams(f"params.yaml: mix.sources: no source {name!r} under sources")
    mixed = list(sources) if mix.sources == "all" else mix.sources
    if mix.weights:
        if mix.top_k is not None:
            raise BadParams("params.yaml: mix.weights and mix.top_k are alternatives; set one")
        for name, w in mix.weights.items():
            if name not in mixed:
                raise BadParams(f"params.yaml: mix.weights.{name}: not a mixed source ({', '.join(mixed)})")
            if not _number(w) or w < 0:
                raise BadParams(f"params.yaml: mix.weights.{name} must be a number >= 0, got {w!r}")
        total = sum(mix.weights.values())
        if abs(total - 1.0) > 1e-9:
            raise BadParams(f"params.yaml: mix.weights must sum to 1, got {total:g}")
    if mix.top_k is not None and not 1 <= mix.top_k <= len(mixed):
        raise BadParams(f"params.yaml: mix.top_k must be between 1 and {len(mixed)}, got {mix.top_k}")


def _check_select(select: SelectParams, score: ScoreParams) -> None:
    known = list(score.scorers) + list(score.imports)
    if select.score not in known:
        raise BadParams(f"params.yaml: select.score: {select.score!r} is not a configured scorer "
                        f"({', '.join(known) or 'none'})")
    if not select.scales:
        raise BadParams("params.yaml: select.scales must name at least one scale")
    for name, n in select.scales.items():
        if isinstance(name, int):
            raise BadParams(f"params.yaml: select.scales.{name}: quote a numeric scale name (\"{name}\": {n}) "
                            f"so DVC can address it as a param")
        _check_name(name, "select.scales")
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise BadParams(f"params.yaml: select.scales.{name} must be a row count >= 1, got {n!r}")


def _check_exports(sft: ExportSftParams, rl: ExportRlParams, sources: dict[str, SourceParams]) -> None:
    from .sharegpt import SAME_ROLE_POLICIES

    if sft.rows_per_shard < 1 or rl.rows_per_shard < 1:
        raise BadParams("params.yaml: export_sft.rows_per_shard and export_rl.rows_per_shard must be >= 1")
    if sft.same_role not in SAME_ROLE_POLICIES:
        raise BadParams(f"params.yaml: export_sft.same_role must be one of {', '.join(SAME_ROLE_POLICIES)}, "
                        f"got {sft.same_role!r}")
    if rl.sources != "all":
        if (not isinstance(rl.sources, list) or not rl.sources
                or any(not isinstance(s, str) or s not in sources for s in rl.sources)):
            raise BadParams(f"params.yaml: export_rl.sources must be \"all\" or a list of source names "
                            f"({', '.join(sources)}), got {rl.sources!r}")
    if rl.max_turns < 1 or rl.max_prompt_length < 1:
        raise BadParams("params.yaml: export_rl.max_turns and export_rl.max_prompt_length must be >= 1")
    for key in ("env_class", "reward_method"):
        if not getattr(rl, key):
            raise BadParams(f"params.yaml: export_rl.{key} must not be empty")


def _build_train(data: Any) -> TrainParams:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise BadParams("params.yaml: train must be a mapping")
    nested = {"sft": SftTrainParams, "rl": RlTrainParams, "modal": ModalParams}
    flat = {k: v for k, v in data.items() if k not in nested}
    train = _build(TrainParams, flat, "train")
    parts = {k: _build(cls, data.get(k), f"train.{k}") for k, cls in nested.items()}
    for key in ("sft", "rl"):
        p = parts[key]
        for name in ("gpus", "epochs", "n_samples_per_prompt", "train_batch_size",
                     "per_device_train_batch_size", "gradient_accumulation_steps"):
            if hasattr(p, name) and getattr(p, name) < 1:
                raise BadParams(f"params.yaml: train.{key}.{name} must be >= 1, got {getattr(p, name)}")
        if p.learning_rate <= 0:
            raise BadParams(f"params.yaml: train.{key}.learning_rate must be > 0, got {p.learning_rate}")
    from .sft_export import template_slots

    template_slots(parts["sft"].template)
    if parts["sft"].cutoff_len < 1:
        raise BadParams(f"params.yaml: train.sft.cutoff_len must be >= 1, got {parts['sft'].cutoff_len}")
    if parts["modal"].timeout_hours < 1:
        raise BadParams("params.yaml: train.modal.timeout_hours must be >= 1")
    return TrainParams(configs=train.configs, runs=train.runs, **parts)


def parse_params(data: Any) -> Params:
    if not isinstance(data, dict):
        raise BadParams("params.yaml must be a mapping")
    for key in data:
        if key not in _TOP:
            raise BadParams(f"params.yaml: unknown top-level key {key!r} (known: {', '.join(_TOP)})")
    lake = data.get("lake", "lake")
    if not isinstance(lake, str) or not lake:
        raise BadParams("params.yaml: lake must be a directory path")
    synth = _build(SynthParams, data.get("synth"), "synth")
    if synth.trials < 1 or synth.tasks < 1:
        raise BadParams("params.yaml: synth.trials and synth.tasks must be >= 1")
    sources_raw = data.get("sources")
    if not isinstance(sources_raw, dict) or not sources_raw:
        raise BadParams("params.yaml: sources must map at least one source name to its settings")
    sources = {}
    for name, raw in sources_raw.items():
        _check_name(name, "source")
        src = _build(SourceParams, raw, f"sources.{name}")
        if src.format not in FORMATS:
            raise BadParams(f"params.yaml: sources.{name}.format must be one of {', '.join(FORMATS)}, got {src.format!r}")
        sources[name] = src
    tokenizer = _build(TokenizerParams, data.get("tokenizer"), "tokenizer")
    if tokenizer.vocab_size < 300:
        raise BadParams(f"params.yaml: tokenizer.vocab_size must be >= 300, got {tokenizer.vocab_size}")
    score = _build(ScoreParams, data.get("score"), "score")
    _check_score(score)
    flt = _build(FilterParams, data.get("filter"), "filter")
    _check_filter(flt)
    mix = _build(MixParams, data.get("mix"), "mix")
    _check_mix(mix, sources)
    select = _build(SelectParams, data.get("select"), "select")
    _check_select(select, score)
    export_sft = _build(ExportSftParams, data.get("export_sft"), "export_sft")
    export_rl = _build(ExportRlParams, data.get("export_rl"), "export_rl")
    _check_exports(export_sft, export_rl, sources)
    return Params(lake=lake, synth=synth, ingest=_build(IngestParams, data.get("ingest"), "ingest"),
                  sources=sources, tokenizer=tokenizer, score=score, filter=flt, mix=mix, select=select,
                  export_sft=export_sft, export_rl=export_rl, train=_build_train(data.get("train")))


def load_params(path: Path | str = "params.yaml") -> Params:
    path = Path(path)
    if not path.is_file():
        raise BadParams(f"{path} not found (run from the repository root, or pass --params)")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise BadParams(f"{path} is not valid YAML: {str(e).splitlines()[0]}") from None
    return parse_params(data)
