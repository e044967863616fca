"""Parquet files written by hand: the bytes of the Hub double's dataset repositories.

Its own module because the format is a job of its own (``rlpipe.local.hub_double.datasets`` only says
which rows go in the files); how the bytes are laid out, and where each number comes from, is below.
"""

from __future__ import annotations

from typing import Any

# pyarrow is not a dependency of the project, so the double writes parquet itself: one row group,
# one uncompressed PLAIN data page (v1) per column, every column REQUIRED (so no definition or
# repetition levels), the footer in Thrift's compact protocol. Field ids and enum values are those
# of the format's parquet.thrift (https://github.com/apache/parquet-format/blob/master/src/main/
# thrift/parquet.thrift): FileMetaData 1 version, 2 schema, 3 num_rows, 4 row_groups, 6 created_by;
# SchemaElement 1 type, 3 repetition_type, 4 name, 5 num_children, 6 converted_type, 10 logicalType;
# RowGroup 1 columns, 2 total_byte_size, 3 num_rows; ColumnChunk 2 file_offset, 3 meta_data;
# ColumnMetaData 1 type, 2 encodings, 3 path_in_schema, 4 codec, 5 num_values, 6/7 sizes,
# 9 data_page_offset; PageHeader 1 type, 2/3 sizes, 5 data_page_header (num_values, encoding,
# definition/repetition level encodings). Types BOOLEAN 0, INT64 2, BYTE_ARRAY 6; REQUIRED 0;
# ConvertedType UTF8 0; Encoding PLAIN 0, RLE 3; codec UNCOMPRESSED 0; page DATA_PAGE 0. The compact
# protocol (https://github.com/apache/thrift/blob/master/doc/specs/thrift-compact-protocol.md):
# field header (id delta << 4 | type), zigzag varints, list header (size << 4 | element type),
# struct stop byte 0. Checked by reading the files back with pyarrow 26.0.1 (not installed here).

_T_I32, _T_I64, _T_BINARY, _T_LIST, _T_STRUCT = 5, 6, 8, 9, 12
_PARQUET_BOOLEAN, _PARQUET_INT64, _PARQUET_BYTE_ARRAY = 0, 2, 6
_MAGIC = b"PAR1"

Cell = str | int | bool


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _thrift_value(kind: int, value: Any) -> bytes:
    if kind in (_T_I32, _T_I64):
        return _varint((value << 1) ^ (value >> 63))  # zigzag
    if kind == _T_BINARY:
        raw = value.encode() if isinstance(value, str) else value
        return _varint(len(raw)) + raw
    if kind == _T_STRUCT:
        return _thrift_struct(value)
    if kind == _T_LIST:
        element, items = value
        head = (
            bytes([len(items) << 4 | element])
            if len(items) < 15
            else bytes([0xF0 | element]) + _varint(len(items))
        )
        return head + b"".join(_thrift_value(element, item) for item in items)
    raise ValueError(f"thrift type {kind} is not written here")


def _thrift_struct(fields: list[tuple[int, int, Any]]) -> bytes:
    """A struct from (field id, compact type, value) in ascending id order; None values are left out."""
    out, last = bytearray(), 0
    for fid, kind, value in fields:
        if value is None:
            continue
        if not 0 < fid - last <= 15:
            raise ValueError("field ids must ascend by at most 15")
        out.append((fid - last) << 4 | kind)
        out += _thrift_value(kind, value)
        last = fid
    out.append(0)
    return bytes(out)


DTYPES = {"bool": _PARQUET_BOOLEAN, "int64": _PARQUET_INT64, "string": _PARQUET_BYTE_ARRAY}


def dtype_of(values: list[Cell]) -> str:
    """The ``datasets`` dtype of a column's values: "bool", "int64" or "string" (empty: "string")."""
    if values and all(isinstance(v, bool) for v in values):
        return "bool"
    if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return "int64"
    if all(isinstance(v, str) for v in values):
        return "string"
    raise ValueError("a column holds str, int or bool values, one type per column")


def _plain(values: list[Cell], dtype: str) -> tuple[int, bytes]:
    """A column's parquet physical type and its PLAIN-encoded values."""
    if dtype == "bool":
        bits = bytearray((len(values) + 7) // 8)
        for i, v in enumerate(values):
            if v:
                bits[i // 8] |= 1 << (i % 8)
        return _PARQUET_BOOLEAN, bytes(bits)
    if dtype == "int64":
        return _PARQUET_INT64, b"".join(int(v).to_bytes(8, "little", signed=True) for v in values)
    if dtype == "string":
        raws = [str(v).encode() for v in values]
        return _PARQUET_BYTE_ARRAY, b"".join(len(r).to_bytes(4, "little") + r for r in raws)
    raise ValueError(f"the double writes {sorted(DTYPES)} columns, not {dtype!r}")


def parquet_bytes(columns: dict[str, list[Cell]], dtypes: dict[str, str] | None = None) -> bytes:
    """A parquet file of these columns (all the same length): strings, int64s or booleans, no nulls.

    ``dtypes`` (``datasets`` names: "string", "int64", "bool") types a column; by default its values
    do, and an empty column is a string column."""
    lengths = {len(values) for values in columns.values()}
    if len(lengths) != 1:
        raise ValueError("every column needs the same number of rows")
    rows = lengths.pop()
    out = bytearray(_MAGIC)
    chunks, schema = [], [[(4, _T_BINARY, "schema"), (5, _T_I32, len(columns))]]
    for name, values in columns.items():
        physical, data = _plain(values, (dtypes or {}).get(name) or dtype_of(values))
        page_header = _thrift_struct(
            [
                (1, _T_I32, 0),
                (2, _T_I32, len(data)),
                (3, _T_I32, len(data)),
                (5, _T_STRUCT, [(1, _T_I32, rows), (2, _T_I32, 0), (3, _T_I32, 3), (4, _T_I32, 3)]),
            ]
        )
        offset, size = len(out), len(page_header) + len(data)
        out += page_header + data
        meta = [
            (1, _T_I32, physical),
            (2, _T_LIST, (_T_I32, [0, 3])),
            (3, _T_LIST, (_T_BINARY, [name])),
            (4, _T_I32, 0),
            (5, _T_I64, rows),
            (6, _T_I64, size),
            (7, _T_I64, size),
            (9, _T_I64, offset),
        ]
        chunks.append([(2, _T_I64, offset), (3, _T_STRUCT, meta)])
        text = physical == _PARQUET_BYTE_ARRAY
        schema.append(
            [
                (1, _T_I32, physical),
                (3, _T_I32, 0),
                (4, _T_BINARY, name),
                (6, _T_I32, 0 if text else None),
                (10, _T_STRUCT, [(1, _T_STRUCT, [])] if text else None),  # LogicalType STRING
            ]
        )
    row_group = [(1, _T_LIST, (_T_STRUCT, chunks)), (2, _T_I64, len(out) - 4), (3, _T_I64, rows)]
    footer = _thrift_struct(
        [
            (1, _T_I32, 1),
            (2, _T_LIST, (_T_STRUCT, schema)),
            (3, _T_I64, rows),
            (4, _T_LIST, (_T_STRUCT, [row_group])),
            (6, _T_BINARY, "rlpipe hub double"),
        ]
    )
    return bytes(out + footer + len(footer).to_bytes(4, "little") + _MAGIC)
