"""TableWriter and ShardWriter: rows as dicts and the same rows as Arrow batches (as DuckDB gives
them) make the same files, byte for byte, with the same version id; a batch that does not fit the
schema is refused."""

from __future__ import annotations

import duckdb
import pytest

from tracelake.core.errors import SchemaViolation
from tracelake.core.schema import load_schema
from tracelake.core.tables import ShardWriter, TableWriter

from ..helpers import tree_bytes


def _rows(n: int) -> list[dict]:
    return [
        {
            "trajectory_id": f"{i:016x}",
            "task_id": f"t{i % 7}",
            "source": "s",
            "rule": "timeout_v1",
            "detail": f"detail {i}" * (i % 3),
        }
        for i in range(n)
    ]


@pytest.mark.parametrize(("n", "batch"), [(0, 10), (5, 2), (2500, 1000), (2500, 333), (1000, 1000)])
def test_dicts_and_duckdb_batches_write_the_same_bytes(tmp_path, n, batch):
    schema = load_schema("dropped")
    rows = _rows(n)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    by_dict = TableWriter(tmp_path / "a", schema)
    for row in rows:
        by_dict.write(row)
    info_a = by_dict.close()
    con = duckdb.connect()
    con.execute("CREATE TABLE r (trajectory_id VARCHAR, task_id VARCHAR, source VARCHAR, rule VARCHAR, detail VARCHAR)")
    if rows:
        con.executemany("INSERT INTO r VALUES (?, ?, ?, ?, ?)", [tuple(r.values()) for r in rows])
    by_batch = TableWriter(tmp_path / "b", schema)
    for b in con.sql("SELECT * FROM r ORDER BY trajectory_id").to_arrow_reader(batch):
        by_batch.write_batch(b)
    info_b = by_batch.close()
    assert info_a == info_b and info_a.rows == n
    assert (tmp_path / "a" / "dropped.parquet").read_bytes() == (tmp_path / "b" / "dropped.parquet").read_bytes()


def test_a_batch_that_breaks_the_schema_is_refused(tmp_path):
    writer = TableWriter(tmp_path, load_schema("dropped"))
    con = duckdb.connect()
    with pytest.raises(SchemaViolation, match="columns differ"):
        writer.write_batch(con.sql("SELECT 'x' AS trajectory_id").to_arrow_table())
    with pytest.raises(SchemaViolation, match="null values in a non-null column"):
        writer.write_batch(
            con.sql(
                "SELECT NULL::VARCHAR AS trajectory_id, 't' AS task_id, 's' AS source, 'r' AS rule, 'd' AS detail"
            ).to_arrow_table()
        )


def _sft_rows(n: int) -> list[dict]:
    return [
        {
            "id": f"s/t{i}_copy0000",
            "conversations": [{"from": "human", "value": "q" * (i % 5)}, {"from": "gpt", "value": f"a{i}"}][
                : 2 * (i % 3 > 0)
            ],
            "system": "" if i % 2 else "be brief",
            "slot_id": f"{i:016x}",
            "trajectory_id": f"{i:016x}",
            "task_id": "k",
            "source": "s",
            "task": f"t{i}",
            "copy": 0,
            "n_tokens": None if i % 4 else i,
        }
        for i in range(n)
    ]


@pytest.mark.parametrize(
    ("n", "rows_per_shard", "cuts"), [(0, 3, []), (10, 3, [1, 4, 4, 9]), (2500, 1000, [999, 1700])]
)
def test_shards_from_dicts_and_from_arrow_batches_cut_anywhere_are_identical(tmp_path, n, rows_per_shard, cuts):
    """ShardWriter: the same rows as dicts or as Arrow batches split anywhere give the same shard
    files and the same version id (a TableDigest of the rows, blind to batching)."""
    schema = load_schema("sft_rows")
    rows = _sft_rows(n)
    by_dict = ShardWriter(tmp_path / "a" / "d", schema, rows_per_shard)
    for row in rows:
        by_dict.write(row)
    info_a = by_dict.close()
    table = schema.from_rows(rows)
    by_batch = ShardWriter(tmp_path / "b" / "d", schema, rows_per_shard)
    for start, stop in zip([0, *cuts], [*cuts, n]):
        by_batch.write_batch(table.slice(start, stop - start))
    info_b = by_batch.close()
    assert info_a == info_b and info_a.rows == n and by_dict.files == by_batch.files
    assert len(by_dict.files) == -(-n // rows_per_shard)
    assert tree_bytes(tmp_path / "a") == tree_bytes(tmp_path / "b")
    changed = ShardWriter(tmp_path / "c" / "d", schema, rows_per_shard)
    changed.write_batch(schema.from_rows(rows[::-1]))
    assert n < 2 or changed.close().version_id != info_a.version_id  # order is content


@pytest.mark.parametrize("batch", [1, 7, 50])
def test_row_groups_end_at_a_byte_bound_wherever_batches_are_cut(tmp_path, monkeypatch, batch):
    """Rows of long text close a row group before it holds ROW_GROUP_BYTES of text (a row past it
    alone): the writer never holds more, and the groups (so the bytes) do not depend on the batches."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from tracelake.core import tables

    monkeypatch.setattr(tables, "ROW_GROUP_BYTES", 1000)
    rows = [{**row, "detail": "x" * (i * 37 % 1500)} for i, row in enumerate(_rows(50))]
    table = load_schema("dropped").from_rows(rows)
    files = []
    for k, cut in enumerate((batch, 50)):
        out = tmp_path / f"cut-{k}"
        out.mkdir()
        writer = TableWriter(out, load_schema("dropped"), row_group_size=10)
        for start in range(0, 50, cut):
            writer.write_batch(table.slice(start, cut))
        writer.close()
        files.append((out / "dropped.parquet").read_bytes())
    assert files[0] == files[1]
    written = pq.ParquetFile(tmp_path / "cut-0" / "dropped.parquet")
    assert written.read().to_pylist() == rows
    for g in range(written.num_row_groups):
        group = written.read_row_group(g)
        text = sum(pc.sum(pc.binary_length(c)).as_py() or 0 for c in group.columns if pa.types.is_string(c.type))
        last = sum((pc.binary_length(c)[-1].as_py() or 0) for c in group.columns if pa.types.is_string(c.type))
        assert group.num_rows <= 10 and (text - last < 1000 or group.num_rows == 1)
