"""The SFT export as shards (export/sft.py `convert_shard`): every executor writes the export that
`dvc repro` built, byte for byte; what workers counted reaches the driver's token cache; and a run
killed mid-way is resumed by a rerun that renders only the rows of the shards never finished."""

from __future__ import annotations

import contextlib
import re
import shutil

import pytest

from stages.export_sft import manifest_params
from tracelake.core.executor import Executor
from tracelake.core.lake import Lake
from tracelake.core.stage import Streamed, write_output
from tracelake.export import sft as sft_module
from tracelake.params import load_params

from ..helpers import killed_after
from ..project.test_pipeline import tree_digest

SCALE = "1k"
BATCH = 64  # trajectories a shard: the 1k scale is many shards


@pytest.fixture(autouse=True)
def small_shards(monkeypatch):
    monkeypatch.setattr(sft_module, "BATCH", BATCH)


@pytest.fixture(scope="module")
def built(sample_project, tmp_path_factory):
    """The sample project's params and its lake, copied (the export is rewritten in place)."""
    root = tmp_path_factory.mktemp("export-shards")
    shutil.copytree(sample_project / "lake", root / "lake")
    params = load_params(sample_project / "params.yaml")
    expected = tree_digest(sample_project / "lake" / "exports" / "sft" / SCALE)
    return sample_project, params, root, expected


def export(built, executor: Executor, cache) -> tuple[str, dict[str, int]]:
    """Export SCALE on `executor` like the stage does: (digest of the export, counting stats)."""
    project, p, root, _ = built
    sft = p.train.sft
    lake = Lake("lake")  # relative, as in the project: dataset_info.yaml names the shards by this path
    found = {}

    def write(tmp):
        manifest, found["counts"] = sft_module.export_sft(
            tmp,
            lake,
            SCALE,
            list(p.sources),
            p.export_sft.model_copy(update={"tokenizer": str(project / p.export_sft.tokenizer)}),
            sft,
            params=manifest_params(p, SCALE),
            token_cache=cache,
            special_tokens=p.filter.special_tokens,
            executor=executor,
        )
        return manifest

    with contextlib.chdir(root):
        write_output(Streamed(lake.sft_export(SCALE), write))
    counts = found["counts"]
    line = counts["token_counts"]
    recalled = int(re.search(r"([\d,]+) renderings counted before", line).group(1).replace(",", ""))
    texts = int(re.search(r"([\d,]+) texts", line).group(1).replace(",", ""))
    encoded = int(re.search(r"([\d,]+) encoded", line).group(1).replace(",", ""))
    return tree_digest(root / lake.sft_export(SCALE)), {"recalled": recalled, "texts": texts, "encoded": encoded}


def test_every_executor_writes_the_export_dvc_built(built, tmp_path):
    expected = built[3]
    local = Executor("local")
    digest, fresh = export(built, local, tmp_path / "local")
    assert digest == expected and local.shards > 3
    assert fresh["encoded"] > 0 and fresh["recalled"] == 0
    processes = Executor("processes", 2)
    digest, counted = export(built, processes, tmp_path / "processes")
    assert digest == expected and processes.shards == local.shards
    # the workers rendered what one process does; a segment two shards share may be encoded by each
    assert counted["texts"] == fresh["texts"] and counted["recalled"] == 0
    assert fresh["encoded"] <= counted["encoded"] < 1.2 * fresh["encoded"]
    # what the workers counted was saved by the driver: a rerun renders nothing
    digest, again = export(built, Executor("processes", 2), tmp_path / "processes")
    assert digest == expected
    assert again["texts"] == 0 and again["encoded"] == 0 and again["recalled"] > 0


def test_a_killed_export_is_resumed_shard_by_shard(built, tmp_path, monkeypatch):
    expected = built[3]
    _, full = export(built, Executor("local"), tmp_path / "clean")
    cache = tmp_path / "cache"
    monkeypatch.setattr(sft_module, "CHECKPOINT_S", 0.0)  # every finished shard is written at once
    real, executed = sft_module.convert_shard, []
    monkeypatch.setattr(sft_module, "convert_shard", killed_after(real, 3, executed))  # killed in the fourth shard
    with pytest.raises(KeyboardInterrupt):
        export(built, Executor("local"), cache)
    monkeypatch.setattr(sft_module, "convert_shard", real)
    digest, rerun = export(built, Executor("local"), cache)
    assert digest == expected
    # the finished shards' rows are recalled, the rest rendered and counted again
    assert 0 < rerun["recalled"] and 0 < rerun["texts"] < full["texts"]
    digest, again = export(built, Executor("local"), cache)
    assert digest == expected and again["texts"] == 0
