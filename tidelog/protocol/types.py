"""The wire protocol's field types, and the one codec that reads and writes any schema.

A schema is data: a tuple of (name, type) pairs, where a type is a primitive, an Array of a type,
or another schema. Decoding gives plain dicts and lists; a RECORDS field decodes to a memoryview
of the request frame (no copy). Encoding writes into a Writer, which keeps a RECORDS value that
is a file slice as a separate part so that a fetch response can go out with ``sendfile``.

Each schema is compiled, the first time it is used, into one reader and one writer function:
consecutive primitive fields become one ``struct`` format read or written in one call, and the
decoded dict is built in one expression; nested schemas, arrays of them, strings and bytes are
written out inline, so a produce request's arrays of topics and partitions cost no call per item.
Every request and response goes through them, several per partition batch, so interpreting the
schema field by field is what they replace.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol


class ProtocolError(ValueError):
    """Bytes that do not parse as the schema says: the connection that sent them is closed."""


class FileSliceLike(Protocol):
    length: int


class Writer:
    """Encoded bytes, as a list of parts: buffers, and file slices sent by ``sendfile``. A
    buffer becomes a part as it is (no copy) when a slice or ``finish`` ends it."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.parts: list[bytearray | FileSliceLike] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.buffer += data

    def write_slice(self, file_slice: FileSliceLike) -> None:
        self._end_buffer()
        self.parts.append(file_slice)

    def finish(self) -> list[bytearray | FileSliceLike]:
        self._end_buffer()
        return self.parts

    def _end_buffer(self) -> None:
        if self.buffer:
            self.parts.append(self.buffer)
            self.buffer = bytearray()

    def finish_buffer(self) -> bytearray:
        """Everything written, as one buffer, for encodings without file slices."""
        if self.parts:
            raise ValueError("this encoding holds file slices; use finish()")
        buffer, self.buffer = self.buffer, bytearray()
        return buffer

    @property
    def size(self) -> int:
        return len(self.buffer) + sum(
            len(part) if isinstance(part, bytearray) else part.length for part in self.parts
        )


class Primitive:
    def __init__(self, name: str, fmt: str) -> None:
        self.name = name
        self.struct = struct.Struct(fmt)

    def read(self, buffer: memoryview, position: int) -> tuple[Any, int]:
        end = position + self.struct.size
        if end > len(buffer):
            raise ProtocolError(f"{self.name} runs past the end of the frame at {position}")
        return self.struct.unpack_from(buffer, position)[0], end

    def write(self, writer: Writer, value: Any) -> None:
        writer.write(self.struct.pack(value))

    def __repr__(self) -> str:
        return self.name


class Boolean(Primitive):
    def __init__(self) -> None:
        super().__init__("boolean", ">?")


class String:
    """int16 length + UTF-8; a nullable string's length is -1 for null."""

    def __init__(self, nullable: bool) -> None:
        self.nullable = nullable

    def read(self, buffer: memoryview, position: int) -> tuple[str | None, int]:
        length, position = INT16.read(buffer, position)
        if length < 0:
            if self.nullable and length == -1:
                return None, position
            raise ProtocolError(f"string length {length} at {position}")
        end = position + length
        if end > len(buffer):
            raise ProtocolError(f"string of {length} bytes runs past the end of the frame")
        try:
            return bytes(buffer[position:end]).decode("utf-8"), end
        except UnicodeDecodeError as error:
            raise ProtocolError(f"string is not UTF-8: {error}") from None

    def write(self, writer: Writer, value: str | None) -> None:
        if value is None:
            if not self.nullable:
                raise ValueError("null in a non-nullable string")
            writer.write(b"\xff\xff")
            return
        data = value.encode("utf-8")
        writer.write(struct.pack(">h", len(data)) + data)

    def __repr__(self) -> str:
        return "nullable_string" if self.nullable else "string"


class Bytes:
    """int32 length + data (-1 for null). RECORDS is the same on the wire, holding a message
    set: it decodes to a memoryview and encodes bytes or a file slice."""

    def __init__(self, records: bool) -> None:
        self.records = records

    def read(self, buffer: memoryview, position: int) -> tuple[memoryview | None, int]:
        length, position = INT32.read(buffer, position)
        if length == -1:
            return None, position
        end = position + length
        if length < 0 or end > len(buffer):
            raise ProtocolError(f"bytes of length {length} at {position} run past the frame")
        return buffer[position:end], end

    def write(self, writer: Writer, value: Any) -> None:
        if value is None:
            writer.write(b"\xff\xff\xff\xff")
        elif hasattr(value, "length") and hasattr(value, "file"):
            writer.write(struct.pack(">i", value.length))
            if value.length:
                writer.write_slice(value)
        else:
            writer.write(struct.pack(">i", len(value)))
            writer.write(value)

    def __repr__(self) -> str:
        return "records" if self.records else "bytes"


@dataclass(frozen=True)
class Array:
    item: Any
    nullable: bool = False

    def read(self, buffer: memoryview, position: int) -> tuple[list | None, int]:
        count, position = INT32.read(buffer, position)
        if count < 0:
            if self.nullable and count == -1:
                return None, position
            raise ProtocolError(f"array length {count} at {position}")
        if count > len(buffer) - position:
            raise ProtocolError(f"array of {count} items cannot fit in the frame")
        read_item = _reader_of(self.item)
        items = []
        for _ in range(count):
            item, position = read_item(buffer, position)
            items.append(item)
        return items, position

    def write(self, writer: Writer, value: list | None) -> None:
        if value is None:
            if not self.nullable:
                raise ValueError("null in a non-nullable array")
            writer.write(b"\xff\xff\xff\xff")
            return
        writer.write(struct.pack(">i", len(value)))
        write_item = _writer_of(self.item)
        for item in value:
            write_item(writer, item)


INT8 = Primitive("int8", ">b")
INT16 = Primitive("int16", ">h")
INT32 = Primitive("int32", ">i")
INT64 = Primitive("int64", ">q")
BOOLEAN = Boolean()
STRING = String(nullable=False)
NULLABLE_STRING = String(nullable=True)
BYTES = Bytes(records=False)
RECORDS = Bytes(records=True)

Schema = tuple[tuple[str, Any], ...]


def schema(*fields: tuple[str, Any]) -> Schema:
    return tuple(fields)


def read(field_type: Any, buffer: memoryview, position: int) -> tuple[Any, int]:
    return _reader_of(field_type)(buffer, position)


def write(field_type: Any, writer: Writer, value: Any) -> None:
    _writer_of(field_type)(writer, value)


# -- the compiled codec --------------------------------------------------------------------------

Reader = Callable[[memoryview, int], tuple[Any, int]]
WriterFunction = Callable[[Writer, Any], None]
# by the schema's id, with the schema itself (so that an id is never reused while cached)
_READERS: dict[int, tuple[Schema, Reader]] = {}
_WRITERS: dict[int, tuple[Schema, WriterFunction]] = {}


def _reader_of(field_type: Any) -> Reader:
    if not isinstance(field_type, tuple):
        return field_type.read
    cached = _READERS.get(id(field_type))
    if cached is None or cached[0] is not field_type:
        cached = _READERS[id(field_type)] = (field_type, _compile_reader(field_type))
    return cached[1]


def _writer_of(field_type: Any) -> WriterFunction:
    if not isinstance(field_type, tuple):
        return field_type.write
    cached = _WRITERS.get(id(field_type))
    if cached is None or cached[0] is not field_type:
        cached = _WRITERS[id(field_type)] = (field_type, _compile_writer(field_type))
    return cached[1]


def _runs(fields: Schema) -> list[tuple[list[str], Any]]:
    """The schema's fields in order, consecutive primitives grouped: (names, struct.Struct) for
    a group, ([name], type) for any other field."""
    runs: list[tuple[list[str], Any]] = []
    for name, member in fields:
        if isinstance(member, Primitive):
            if runs and isinstance(runs[-1][1], list):
                runs[-1][0].append(name)
                runs[-1][1].append(member)
                continue
            runs.append(([name], [member]))
        else:
            runs.append(([name], member))
    return [
        (names, struct.Struct(">" + "".join(m.struct.format[1:] for m in member)))
        if isinstance(member, list)
        else (names, member)
        for names, member in runs
    ]


class _Emitter:
    """Source lines of one compiled reader or writer function, with the objects they name.

    Nested schemas, arrays, strings and byte fields are written out inline (loops and struct
    calls in the one function), so a request of nested arrays costs no call per item; any
    other field type is called through its own ``read`` or ``write``."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.scope: dict[str, Any] = {
            "ProtocolError": ProtocolError,
            "I16": INT16.struct,
            "I32": INT32.struct,
        }
        self._names = 0

    def name(self, prefix: str, value: Any = None) -> str:
        self._names += 1
        name = f"{prefix}{self._names}"
        if value is not None:
            self.scope[name] = value
        return name

    def add(self, indent: int, *lines: str) -> None:
        self.lines += ["    " * indent + line for line in lines]

    def function(self, signature: str, result: str) -> Any:
        source = "\n".join([f"def {signature}:", *self.lines, f"    return {result}"])
        exec(source, self.scope)
        return self.scope[signature.split("(")[0]]


def _read_length(out: _Emitter, length: str, unpacker: str, what: str, indent: int) -> None:
    """Lines reading an int16 (I16) or int32 (I32) length into ``length``, as Primitive.read."""
    size = 2 if unpacker == "I16" else 4
    out.add(
        indent,
        f"if position + {size} > len(buffer):",
        f"    raise ProtocolError(f'{what} runs past the end of the frame at {{position}}')",
        f"{length}, = {unpacker}.unpack_from(buffer, position)",
        f"position += {size}",
    )


def _emit_read(out: _Emitter, member: Any, target: str, indent: int) -> None:
    """Lines that read one field of type ``member`` at ``position`` into ``target``."""
    if isinstance(member, tuple):
        values: list[tuple[str, str]] = []
        for names, run in _runs(member):
            variables = [out.name("v") for _ in names]
            values += zip(names, variables, strict=True)
            if isinstance(run, struct.Struct):
                unpacker = out.name("S", run)
                what = "/".join(names)
                out.add(
                    indent,
                    f"end = position + {run.size}",
                    "if end > len(buffer):",
                    f"    raise ProtocolError(f'{what} runs past the end of the frame at "
                    "{position}')",
                    f"{', '.join(variables)}, = {unpacker}.unpack_from(buffer, position)",
                    "position = end",
                )
            else:
                _emit_read(out, run, variables[0], indent)
        body = ", ".join(f"{name!r}: {variable}" for name, variable in values)
        out.add(indent, f"{target} = {{{body}}}")
    elif isinstance(member, Array) and not isinstance(member.item, Primitive):
        count, items, item = out.name("n"), out.name("items"), out.name("item")
        _read_length(out, count, "I32", "int32", indent)
        out.add(indent, f"if {count} < 0:")
        if member.nullable:
            out.add(indent + 1, f"if {count} != -1:")
            out.add(indent + 2, f"raise ProtocolError(f'array length {{{count}}} at {{position}}')")
            out.add(indent + 1, f"{target} = None")
        else:
            out.add(indent + 1, f"raise ProtocolError(f'array length {{{count}}} at {{position}}')")
        out.add(
            indent,
            "else:",
            f"    if {count} > len(buffer) - position:",
            f"        raise ProtocolError(f'array of {{{count}}} items cannot fit in the frame')",
            f"    {items} = []",
            f"    for _ in range({count}):",
        )
        _emit_read(out, member.item, item, indent + 2)
        out.add(indent + 2, f"{items}.append({item})")
        out.add(indent + 1, f"{target} = {items}")
    elif isinstance(member, String):
        length = out.name("length")
        _read_length(out, length, "I16", "int16", indent)
        out.add(indent, f"if {length} < 0:")
        if member.nullable:
            out.add(indent + 1, f"if {length} != -1:")
            out.add(
                indent + 2, f"raise ProtocolError(f'string length {{{length}}} at {{position}}')"
            )
            out.add(indent + 1, f"{target} = None")
        else:
            out.add(
                indent + 1, f"raise ProtocolError(f'string length {{{length}}} at {{position}}')"
            )
        out.add(
            indent,
            "else:",
            f"    end = position + {length}",
            "    if end > len(buffer):",
            f"        raise ProtocolError(f'string of {{{length}}} bytes runs past the end of the "
            "frame')",
            "    try:",
            f"        {target} = str(buffer[position:end], 'utf-8')",
            "    except UnicodeDecodeError as error:",
            "        raise ProtocolError(f'string is not UTF-8: {error}') from None",
            "    position = end",
        )
    elif isinstance(member, Bytes):
        length = out.name("length")
        _read_length(out, length, "I32", "int32", indent)
        out.add(
            indent,
            f"if {length} == -1:",
            f"    {target} = None",
            "else:",
            f"    end = position + {length}",
            f"    if {length} < 0 or end > len(buffer):",
            f"        raise ProtocolError(f'bytes of length {{{length}}} at {{position}} run past "
            "the frame')",
            f"    {target} = buffer[position:end]",
            "    position = end",
        )
    else:
        reader = out.name("R", member.read)
        out.add(indent, f"{target}, position = {reader}(buffer, position)")


def _compile_reader(fields: Schema) -> Reader:
    """A function reading ``fields`` into a dict, as ``read`` would field by field."""
    out = _Emitter()
    _emit_read(out, fields, "value", 1)
    return out.function("read_schema(buffer, position)", "value, position")


def _emit_null_or(
    out: _Emitter, value: str, indent: int, nullable: bool, kind: str, length_bytes: int
) -> None:
    """Lines that write a null ``value`` (a length of -1; an error if not ``nullable``), then
    open the ``else:`` block the caller writes the value in, one indent deeper."""
    out.add(indent, f"if {value} is None:")
    if nullable:
        null = bytes([0xFF] * length_bytes)
        out.add(indent + 1, f"writer.buffer += {null!r}")
    else:
        out.add(indent + 1, f"raise ValueError('null in a non-nullable {kind}')")
    out.add(indent, "else:")


def _emit_write(out: _Emitter, member: Any, value: str, indent: int) -> None:
    """Lines that write ``value`` (an expression naming a local) as a field of type ``member``."""
    if isinstance(member, tuple):
        for names, run in _runs(member):
            if isinstance(run, struct.Struct):
                packer = out.name("S", run)
                arguments = ", ".join(f"{value}[{name!r}]" for name in names)
                out.add(indent, f"writer.buffer += {packer}.pack({arguments})")
            else:
                field = out.name("f")
                out.add(indent, f"{field} = {value}[{names[0]!r}]")
                _emit_write(out, run, field, indent)
    elif isinstance(member, Array) and not isinstance(member.item, Primitive):
        item = out.name("item")
        _emit_null_or(out, value, indent, member.nullable, "array", 4)
        out.add(
            indent + 1,
            f"writer.buffer += I32.pack(len({value}))",
            f"for {item} in {value}:",
            "    pass",  # an item of an empty schema writes nothing
        )
        _emit_write(out, member.item, item, indent + 2)
    elif isinstance(member, String):
        data = out.name("data")
        _emit_null_or(out, value, indent, member.nullable, "string", 2)
        out.add(indent + 1, f"{data} = {value}.encode('utf-8')")
        out.add(indent + 1, f"writer.buffer += I16.pack(len({data})) + {data}")
    elif isinstance(member, Bytes) and not member.records:
        _emit_null_or(out, value, indent, True, "bytes", 4)
        out.add(indent + 1, f"writer.buffer += I32.pack(len({value}))")
        out.add(indent + 1, f"writer.buffer += {value}")
    else:  # RECORDS (a file slice is a part of its own) and arrays of primitives
        writer = out.name("W", member.write)
        out.add(indent, f"{writer}(writer, {value})")


def _compile_writer(fields: Schema) -> WriterFunction:
    """A function writing a dict as ``fields`` say, as ``write`` would field by field; a
    missing field is a ValueError naming it."""
    out = _Emitter()
    out.add(1, "try:")
    _emit_write(out, fields, "value", 2)
    out.add(
        2,
        "pass",  # an empty schema writes nothing
    )
    out.add(
        1,
        "except KeyError as error:",
        "    raise ValueError(f'missing field {error.args[0]!r}') from None",
    )
    return out.function("write_schema(writer, value)", "None")


def decode(field_type: Any, data: bytes | memoryview, position: int = 0) -> tuple[Any, int]:
    try:
        return read(field_type, memoryview(data), position)
    except struct.error as error:
        raise ProtocolError(str(error)) from None


def encode(field_type: Any, value: Any) -> bytes:
    writer = Writer()
    write(field_type, writer, value)
    return bytes(writer.finish_buffer())
