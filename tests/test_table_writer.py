"""TableWriter: rows as dicts and the same rows as Arrow batches (as DuckDB gives them) make the
same file, byte for byte, with the same version id; a batch that does not fit the schema is refused."""

from __future__ import annotations

import duckdb
import pytest

from tracelake.core.errors import SchemaViolation
from tracelake.core.lake import TableWriter
from tracelake.core.schema import load_schema


def _rows(n: int) -> list[dict]:
    return [{"trajectory_id": f"{i:016x}", "task_id": f"t{i % 7}", "source": "s", "rule": "timeout_v1",
             "detail": f"detail {i}" * (i % 3)} for i in range(n)]


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
        writer.write_batch(con.sql("SELECT NULL::VARCHAR AS trajectory_id, 't' AS task_id, 's' AS source, "
                                   "'r' AS rule, 'd' AS detail").to_arrow_table())
