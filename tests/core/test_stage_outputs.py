"""The stage contract's outputs (core/stage.py): publish writes every output directory, an `Output`'s
tables or what a `Streamed` output's write puts in the temporary directory it opened, the manifest
last, then the swap; a failed write leaves the previous version and nothing beside it."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

from tracelake.core.errors import BadInput
from tracelake.core.outputs import read_manifest
from tracelake.core.stage import Manifest, Result, Stage, Streamed, publish, write_output


def _stage(**kw) -> Stage:
    return Stage("demo", "a demo stage", lambda ctx: Result(), params=(), **kw)


def _manifest(n: int) -> Manifest:
    return Manifest(kind="demo", tables=[], inputs={}, params={"n": n}, formulas={}, counts={"n": n})


def _rows(text: str, manifest: Manifest | None):
    """A write that puts rows.txt in the directory and returns `manifest`."""

    def write(tmp: Path) -> Manifest | None:
        (tmp / "rows.txt").write_text(text)
        return manifest

    return write


def test_a_streamed_output_is_filled_then_its_manifest_written_then_swapped(tmp_path):
    out = tmp_path / "lake" / "demo"
    seen = []

    def write(tmp: Path) -> Manifest:
        check_tmp = tmp != out and tmp.parent == out.parent and not out.exists()
        seen.append(check_tmp)
        (tmp / "rows.txt").write_text("a\n")
        return _manifest(1)

    manifest = write_output(Streamed(out, write))
    assert seen == [True]
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "rows.txt"]
    assert read_manifest(out) == manifest and manifest["counts"] == {"n": 1} and manifest["kind"] == "demo"
    assert [p.name for p in out.parent.iterdir()] == ["demo"]


def test_a_directory_of_plain_files_has_no_manifest(tmp_path):
    out = tmp_path / "tokenizer"
    out.mkdir()
    (out / "stale.txt").write_text("old")
    assert write_output(Streamed(out, _rows("{}\n", None))) is None
    assert [p.name for p in out.iterdir()] == ["rows.txt"]


def test_publish_writes_the_outputs_in_order_and_gives_their_manifests_to_the_metrics(tmp_path):
    first, second = tmp_path / "lake" / "a", tmp_path / "lake" / "b"

    def write_second(tmp: Path) -> Manifest:  # reads the first output, published before it
        (tmp / "copy.txt").write_text((first / "rows.txt").read_text())
        return _manifest(2)

    result = Result(
        [Streamed(first, _rows("a\n", _manifest(1))), Streamed(second, write_second)],
        metrics=lambda manifests: {"versions": [m["version_id"] for m in manifests]},
        summary=lambda manifests: [f"{len(manifests)} outputs"],
    )
    with contextlib.chdir(tmp_path):
        manifests = publish(_stage(metrics="metrics/demo.json"), result)
        written = json.loads(Path("metrics/demo.json").read_text())
    assert (second / "copy.txt").read_text() == "a\n"
    assert written == {"versions": [m["version_id"] for m in manifests]}


def test_a_failed_write_leaves_the_previous_version_and_no_metrics(tmp_path):
    out = tmp_path / "lake" / "demo"
    write_output(Streamed(out, _rows("v1\n", _manifest(1))))
    before = read_manifest(out)

    def broken(tmp: Path) -> Manifest:
        (tmp / "rows.txt").write_text("v2, half written")
        raise BadInput("the input ended early")

    with contextlib.chdir(tmp_path), pytest.raises(BadInput):
        publish(_stage(metrics="metrics/demo.json"), Result([Streamed(out, broken)], metrics={"n": 2}))
    assert read_manifest(out) == before and (out / "rows.txt").read_text() == "v1\n"
    assert [p.name for p in out.parent.iterdir()] == ["demo"]
    assert not (tmp_path / "metrics").exists()
