"""A content digest of Arrow rows that reads buffers, not Python objects.

`TableDigest` names the logical values of the rows appended to it, in order: the same rows give
the same digest however they were batched or chunked, on any machine and with any pyarrow (only
values enter it, never buffer layouts or file bytes). Each leaf of the schema feeds running
sha256 streams: its validity (one byte a row), and for text its UTF-8 lengths and bytes, for
numbers their 64-bit values (little-endian: the byte order of every machine this runs on), for lists their lengths (then the values, recursively),
for structs each field. The digest hashes the stream digests in schema order.

Export shards are named by it (dataset ids): hashing 100K real-sized rows this way costs one
pass of sha256 over their text, where per-row canonical JSON cost a serialization first.
"""

from __future__ import annotations

import hashlib

import pyarrow as pa
import pyarrow.compute as pc


class TableDigest:
    def __init__(self, schema: pa.Schema):
        self.schema = schema
        self.rows = 0
        self._streams: dict[str, hashlib._Hash] = {}

    def _stream(self, name: str) -> "hashlib._Hash":
        h = self._streams.get(name)
        if h is None:
            h = self._streams[name] = hashlib.sha256()
        return h

    def update(self, data: pa.Table | pa.RecordBatch) -> None:
        if data.schema.names != self.schema.names:
            raise ValueError(f"columns {data.schema.names} are not {self.schema.names}")
        if not data.num_rows:
            return
        for field in self.schema:
            column = data.column(field.name)
            array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
            self._add(field.name, array)
        self.rows += data.num_rows

    def _add(self, path: str, array: pa.Array) -> None:
        self._stream(path + "#valid").update(_fixed(array.is_valid(), pa.uint8()))
        t = array.type
        if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
            self._stream(path + "#len").update(_fixed(pc.binary_length(array), pa.int64()))
            stream = self._stream(path + "#data")  # every stream, every time: the set must not depend on batching
            offsets, data = array.buffers()[1:3]
            if data is not None and len(array):
                wide = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
                positions = memoryview(offsets).cast("q" if wide else "i")
                stream.update(memoryview(data)[positions[array.offset] : positions[array.offset + len(array)]])
        elif pa.types.is_integer(t) or pa.types.is_boolean(t):
            self._stream(path).update(_fixed(array, pa.int64()))
        elif pa.types.is_floating(t):
            self._stream(path).update(_fixed(array, pa.float64()))
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            self._stream(path + "#len").update(_fixed(pc.list_value_length(array), pa.int64()))
            self._add(path + ".item", array.flatten())
        elif pa.types.is_struct(t):
            for field, child in zip(t, array.flatten()):
                self._add(f"{path}.{field.name}", child)
        else:
            raise TypeError(f"{path}: cannot digest Arrow type {t}")

    def hexdigest(self) -> str:
        h = hashlib.sha256(f"rows={self.rows}\n".encode())
        for name in sorted(self._streams):
            h.update(f"{name}={self._streams[name].hexdigest()}\n".encode())
        return h.hexdigest()


def _fixed(array: pa.Array, as_type: pa.DataType) -> memoryview:
    """The values of a fixed-width array cast to as_type, nulls as 0 (the validity stream tells
    them apart), as little-endian bytes (Arrow's layout on every platform it runs on here)."""
    if not len(array):
        return memoryview(b"")
    values = pc.cast(pc.fill_null(pc.cast(array, as_type), 0), as_type)
    width = as_type.bit_width // 8
    return memoryview(values.buffers()[1])[values.offset * width : (values.offset + len(values)) * width]
