"""Table schemas, declared once in schemas/*.yaml and enforced at every read and write.

A column type is written as in the YAML files: string, binary, bool, int32, int64, float64,
list<T>, struct<name: T, ...>. Columns are non-null unless marked `nullable: true`.

    from tracelake.core.schema import load_schema
    schema = load_schema("trajectories")      # -> TableSchema (arrow schema, key column, fingerprint)
    schema.validate(table)                    # raises SchemaViolation naming the column
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import yaml

from tracelake.core.assets import asset_dir
from tracelake.core.errors import SchemaViolation
from tracelake.core.hashing import content_id

TABLES = (
    "tasks",
    "trajectories",
    "rejects",
    "scores",
    "responses",
    "task_clusters",
    "contamination",
    "pool",
    "dropped",
    "selection",
    "sft_rows",
    "export_rejects",
    "rl_prompts",
    "harbor_tasks",
    "rl_dropped",
)

_SCALARS = {
    "string": pa.string(),
    "binary": pa.binary(),
    "bool": pa.bool_(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "float64": pa.float64(),
}


def schemas_dir() -> Path:
    return asset_dir("schemas")


def parse_type(text: str) -> pa.DataType:
    """Parse 'list<struct<role: string, content: string>>' into an arrow type."""
    dtype, rest = _parse(text.replace(" ", ""))
    if rest:
        raise ValueError(f"trailing text in type {text!r}: {rest!r}")
    return dtype


def _parse(s: str) -> tuple[pa.DataType, str]:
    m = re.match(r"[a-z0-9]+", s)
    if not m:
        raise ValueError(f"expected a type name at {s!r}")
    name, rest = m.group(0), s[m.end() :]
    if name in _SCALARS:
        return _SCALARS[name], rest
    if name == "list" and rest.startswith("<"):
        inner, rest = _parse(rest[1:])
        if not rest.startswith(">"):
            raise ValueError(f"expected '>' at {rest!r}")
        return pa.list_(inner), rest[1:]
    if name == "struct" and rest.startswith("<"):
        fields, rest = [], rest[1:]
        while True:
            fm = re.match(r"([a-z_][a-z0-9_]*):", rest)
            if not fm:
                raise ValueError(f"expected 'field:' at {rest!r}")
            ftype, rest = _parse(rest[fm.end() :])
            fields.append(pa.field(fm.group(1), ftype))
            if rest.startswith(","):
                rest = rest[1:]
                continue
            if rest.startswith(">"):
                return pa.struct(fields), rest[1:]
            raise ValueError(f"expected ',' or '>' at {rest!r}")
    raise ValueError(f"unknown type {name!r}")


@dataclass(frozen=True)
class TableSchema:
    name: str
    version: int
    key: str
    arrow: pa.Schema
    docs: dict[str, str]

    @property
    def fingerprint(self) -> str:
        """Hash of names, types and nullability: changes whenever the contract does."""
        spec = [[f.name, str(f.type), f.nullable] for f in self.arrow]
        return content_id("schema", [self.name, self.version, spec])

    @property
    def columns(self) -> list[str]:
        return self.arrow.names

    def validate(self, table: pa.Table) -> pa.Table:
        """Check names, order, types and non-null columns; return the table unchanged."""
        if table.schema.names != self.arrow.names:
            missing = [c for c in self.arrow.names if c not in table.schema.names]
            extra = [c for c in table.schema.names if c not in self.arrow.names]
            raise SchemaViolation(
                f"{self.name}: columns differ from schemas/{self.name}.yaml "
                f"(missing {missing}, unexpected {extra}, or out of order)"
            )
        for field in self.arrow:
            actual = table.schema.field(field.name).type
            if not actual.equals(field.type):
                raise SchemaViolation(
                    f"{self.name}.{field.name}: type {actual} but schemas/{self.name}.yaml says {field.type}"
                )
            if not field.nullable and table.column(field.name).null_count:
                raise SchemaViolation(f"{self.name}.{field.name}: null values in a non-null column")
        return table

    def conform(self, data: pa.Table | pa.RecordBatch) -> pa.Table:
        """An Arrow table or batch from an engine (DuckDB gives every column nullable, lists with
        child `l`) as this schema's exact types, validated. Names and order must already match."""
        table = pa.Table.from_batches([data]) if isinstance(data, pa.RecordBatch) else data
        if table.schema.names != self.arrow.names:
            return self.validate(table)  # raises, naming the columns
        loose = pa.schema([f.with_nullable(True) for f in self.arrow])  # nulls are judged by validate
        try:
            table = table.cast(loose)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            raise SchemaViolation(f"{self.name}: cannot be read as schemas/{self.name}.yaml: {e}") from None
        return self.validate(table).cast(self.arrow)

    def from_rows(self, rows: list[dict]) -> pa.Table:
        """Build a validated table from row dicts (missing keys are an error, not a null)."""
        for i, row in enumerate(rows):
            if row.keys() != set(self.arrow.names):
                diff = set(self.arrow.names) ^ row.keys()
                raise SchemaViolation(f"{self.name}: row {i} has wrong fields {sorted(diff)}")
        table = pa.Table.from_pylist(rows, schema=self.arrow)
        return self.validate(table)


@functools.cache
def load_schema(name: str) -> TableSchema:
    path = schemas_dir() / f"{name}.yaml"
    spec = yaml.safe_load(path.read_text())
    fields, docs = [], {}
    for col in spec["columns"]:
        fields.append(pa.field(col["name"], parse_type(col["type"]), nullable=bool(col.get("nullable", False))))
        docs[col["name"]] = col.get("doc", "")
    if spec["table"] != name or spec["key"] not in docs:
        raise SchemaViolation(f"schemas/{name}.yaml: table name or key column is wrong")
    return TableSchema(name=name, version=int(spec["version"]), key=spec["key"], arrow=pa.schema(fields), docs=docs)
