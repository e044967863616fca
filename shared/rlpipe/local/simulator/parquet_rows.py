"""How many rows a parquet file holds, read from its footer: what ``datasets`` would load from the
staged split, without a parquet library in the simulator.

A parquet file ends with its ``FileMetaData``, Thrift compact protocol, then the footer's length
(4 bytes, little-endian) and ``PAR1`` (https://parquet.apache.org/docs/file-format/, "File
Format"); ``num_rows`` is its field 3, after ``version`` (1) and the ``schema`` list (2)
(parquet-format ``src/main/thrift/parquet.thrift``, ``struct FileMetaData``). The compact
protocol: a field header byte holds the id delta (high nibble) and the type (low nibble); i32/i64
are zigzag varints; a list header holds the size (high nibble, 15 = a varint follows) and the
element type; a struct ends with a 0 byte (Thrift ``doc/specs/thrift-compact-protocol.md``).
"""

from __future__ import annotations

MAGIC = b"PAR1"
# Compact-protocol type ids (thrift-compact-protocol.md, "Struct encoding").
_TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)


class NotParquet(ValueError):
    """The bytes do not end the way a parquet file does."""


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def byte(self) -> int:
        value = self.data[self.pos]
        self.pos += 1
        return value

    def varint(self) -> int:
        shift = result = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def skip(self, kind: int) -> None:
        if kind in (_TRUE, _FALSE):
            return
        if kind == _BYTE:
            self.pos += 1
        elif kind in (_I16, _I32, _I64):
            self.varint()
        elif kind == _DOUBLE:
            self.pos += 8
        elif kind == _BINARY:
            length = self.varint()  # read first: `self.pos += self.varint()` would lose its bytes
            self.pos += length
        elif kind in (_LIST, _SET):
            header = self.byte()
            size = header >> 4 if header >> 4 != 15 else self.varint()
            for _ in range(size):
                self.skip(header & 0x0F)
        elif kind == _MAP:
            size = self.varint()
            if size:
                types = self.byte()
                for _ in range(size):
                    self.skip(types >> 4)
                    self.skip(types & 0x0F)
        elif kind == _STRUCT:
            self.struct(lambda field, kind: False)
        else:
            raise NotParquet(f"unknown thrift type {kind}")

    def struct(self, wanted: object) -> None:
        """Read fields until the stop byte, calling ``wanted(field, kind)``; it returns True when it
        consumed the value itself."""
        field = 0
        while True:
            header = self.byte()
            if header == 0:
                return
            delta, kind = header >> 4, header & 0x0F
            field = field + delta if delta else self.zigzag()
            if not wanted(field, kind):  # type: ignore[operator]
                self.skip(kind)


def num_rows(data: bytes) -> int:
    """``FileMetaData.num_rows`` of a whole parquet file."""
    if len(data) < 12 or data[:4] != MAGIC or data[-4:] != MAGIC:
        raise NotParquet("not a parquet file (no PAR1 at both ends)")
    length = int.from_bytes(data[-8:-4], "little")
    reader = _Reader(data[-8 - length : -8])
    found: list[int] = []

    def take(field: int, kind: int) -> bool:
        if field == 3 and kind == _I64:
            found.append(reader.zigzag())
            return True
        return False

    reader.struct(take)
    if not found:
        raise NotParquet("the footer has no num_rows")
    return found[0]
