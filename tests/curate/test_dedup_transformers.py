"""The transformers embedder (dedup.embedding.embedder: transformers) with a tiny random Qwen3
built locally, run by the training environment's interpreter: unit vectors, duplicates at cosine
1, vectors cached by (model fingerprint, text), the same table on a rerun with one thread."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest

from tracelake.core.errors import BadParams
from tracelake.curate.dedup.embed import TransformersEmbedder
from tracelake.curate.dedup.run import run_dedup
from tracelake.curate.params import DecontaminateParams, DedupParams
from tracelake.tokens.tokenizer import build_tokenizer

from ..helpers import ROOT, run_ok, train_python

pytestmark = pytest.mark.train_env
TINY = ROOT / "tests" / "train_env" / "tiny_qwen3.py"
TEXTS = [
    "Configure nginx to serve /var/www on port 8080 and reload it without downtime.",
    "configure NGINX to serve /var/www on port 8080 and reload it without downtime",
    "Count the lines of every python file under src recursively and print the total.",
    "Fix the TypeError raised by parse_args in click/core.py for an empty argument list.",
]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    tokenizer = build_tokenizer(tmp_path_factory.mktemp("tok") / "tokenizer")
    out = tmp_path_factory.mktemp("tiny-qwen3")
    run_ok([str(train_python()), str(TINY), str(tokenizer), str(out)], ROOT)
    return out


def params(model, **embedding) -> DedupParams:
    return DedupParams.model_validate(
        {
            "minhash": {"enabled": False},
            "embedding": {
                "embedder": "transformers",
                "model": str(model),
                "python": str(train_python()),
                "threshold": 0.999,
                **embedding,
            },
        }
    )


def tasks(texts: list[str]) -> pa.Table:
    return pa.table(
        {
            "task_id": [f"t{i}" for i in range(len(texts))],
            "source": ["s"] * len(texts),
            "task": [f"task-{i}" for i in range(len(texts))],
            "instruction": texts,
            "n_trajectories": [1] * len(texts),
        }
    )


def test_vectors_are_unit_and_identical_texts_cluster(model, tmp_path):
    embedder = TransformersEmbedder(str(model), str(train_python()))
    vectors = embedder.embed([embedder.prepare(t) for t in TEXTS + TEXTS[:1]])
    assert vectors.shape == (5, embedder.dim) and np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(vectors[0], vectors[4])  # the same text, the same vector

    dup = TEXTS + [TEXTS[2] + " "]  # differs only by whitespace the embedder strips: same text, same vector
    result = run_dedup(
        tasks(dup), params(model), DecontaminateParams(), lance_dir=tmp_path / "a", cache_root=tmp_path / "cache"
    )
    clusters = dict(zip(result.task_clusters["task_id"].to_pylist(), result.task_clusters["cluster_id"].to_pylist()))
    assert clusters["t4"] == clusters["t2"]
    assert result.formulas["embedding"].startswith("transformers_mean_v1 ")
    assert result.cache.embedded == 4 and result.cache.cached == 0

    # a rerun with one thread: every vector from the cache, the same table
    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        again = run_dedup(
            tasks(dup), params(model), DecontaminateParams(), lance_dir=tmp_path / "b", cache_root=tmp_path / "cache"
        )
    finally:
        del os.environ["OMP_NUM_THREADS"]
    assert again.cache.embedded == 0 and again.cache.cached == 4
    assert again.embeddings.equals(result.embeddings) and again.task_clusters.equals(result.task_clusters)
    fresh = run_dedup(tasks(dup), params(model), DecontaminateParams(), lance_dir=tmp_path / "c", cache_root=None)
    assert fresh.embeddings.equals(result.embeddings)  # recomputed: the same vectors


def test_bad_model_directory_is_one_line(tmp_path):
    with pytest.raises(BadParams, match="is not a model directory"):
        TransformersEmbedder(str(tmp_path))
