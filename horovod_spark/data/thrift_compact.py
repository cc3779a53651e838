"""Just enough of Thrift's compact protocol to read Parquet page headers.

pyarrow reads Parquet metadata but gives Python no access to pages; the fixed-width list fast path
(fixed_width_columns.py) walks a column chunk's pages itself, so it decodes each page's header, a
Thrift struct, here. Structs come back as {field id: value}; nested structs as dicts, lists as
Python lists, binary as bytes. Anything malformed raises ThriftError, which the caller treats as
"not a layout I know" and hands the row group to pyarrow.
"""
import struct
from typing import Tuple

_STOP, _TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(13)
_MAX_DEPTH = 16


class ThriftError(ValueError):
    pass


def read_struct(buf, pos: int = 0) -> Tuple[dict, int]:
    """The struct starting at ``buf[pos]`` and the position just after it."""
    return _struct(buf, pos, 0)


def read_uvarint(buf, pos: int, max_bits: int = 64) -> Tuple[int, int]:
    """The unsigned LEB128 varint at ``buf[pos]`` (of at most ``max_bits`` bits' worth of 7-bit
    groups) and the position after it. Also the run headers of Parquet's RLE/bit-packed levels.
    ``buf`` must index to ints (bytes, bytearray, a byte memoryview)."""
    result = shift = 0
    while True:
        if pos >= len(buf) or shift >= max_bits:
            raise ThriftError("truncated or overlong varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _zigzag(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


def _struct(buf, pos: int, depth: int) -> Tuple[dict, int]:
    if depth > _MAX_DEPTH:
        raise ThriftError("structs nested too deep")
    out, field_id = {}, 0
    while True:
        if pos >= len(buf):
            raise ThriftError("struct runs past the end of the buffer")
        header = buf[pos]
        pos += 1
        if header == _STOP:
            return out, pos
        kind, delta = header & 0x0F, header >> 4
        if delta:
            field_id += delta
        else:
            raw, pos = read_uvarint(buf, pos)
            field_id = _zigzag(raw)
        out[field_id], pos = _value(buf, pos, kind, depth)


def _value(buf, pos: int, kind: int, depth: int):
    if kind in (_TRUE, _FALSE):  # a struct field's bool lives in its type nibble
        return kind == _TRUE, pos
    if kind == _BYTE:
        if pos >= len(buf):
            raise ThriftError("truncated byte")
        return buf[pos], pos + 1
    if kind in (_I16, _I32, _I64):
        raw, pos = read_uvarint(buf, pos)
        return _zigzag(raw), pos
    if kind == _DOUBLE:
        if pos + 8 > len(buf):
            raise ThriftError("truncated double")
        return struct.unpack_from("<d", buf, pos)[0], pos + 8
    if kind == _BINARY:
        size, pos = read_uvarint(buf, pos)
        if pos + size > len(buf):
            raise ThriftError("truncated binary")
        return bytes(buf[pos:pos + size]), pos + size
    if kind in (_LIST, _SET):
        if pos >= len(buf):
            raise ThriftError("truncated list")
        header = buf[pos]
        pos += 1
        size, element = header >> 4, header & 0x0F
        if size == 15:
            size, pos = read_uvarint(buf, pos)
        items = []
        for _ in range(size):
            # Inside a list a bool is a whole byte, unlike a struct field's.
            if element in (_TRUE, _FALSE):
                if pos >= len(buf):
                    raise ThriftError("truncated bool")
                item, pos = buf[pos] == 1, pos + 1
            else:
                item, pos = _value(buf, pos, element, depth + 1)
            items.append(item)
        return items, pos
    if kind == _STRUCT:
        return _struct(buf, pos, depth + 1)
    if kind == _MAP:
        raise ThriftError("maps do not occur in Parquet page headers")
    raise ThriftError("unknown compact-protocol type %d" % kind)
