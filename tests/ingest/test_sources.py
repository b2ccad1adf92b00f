"""ingest/sources.py: ingest's check that the files it read are the version `scan` recorded."""

from __future__ import annotations

import pytest

from tracelake.core.errors import BadInput
from tracelake.core.outputs import write_bytes
from tracelake.ingest.params import SourceParams
from tracelake.ingest.sources import check_unchanged, manifest_path, scan_source


def test_a_source_written_to_after_its_scan_stops_ingest(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "traces.jsonl").write_text('{"a": 1}\n')
    src = SourceParams(format="traces", path="data/traces.jsonl", tasks="data/traces.jsonl")
    cache = tmp_path / "cache"
    check_unchanged("mine", src, cache)  # run by hand before any scan: no version to compare with
    manifest_path("mine").parent.mkdir(parents=True)
    write_bytes(manifest_path("mine"), scan_source("mine", src, cache)[0])
    check_unchanged("mine", src, cache)  # as scanned
    (tmp_path / "data" / "traces.jsonl").write_text('{"a": 2}\n')
    with pytest.raises(BadInput, match=r"source mine: its files changed since `scan` listed them"):
        check_unchanged("mine", src, cache)
