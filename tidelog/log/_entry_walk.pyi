from collections.abc import Callable

def map_plain(
    data: bytes, position: int, limit: int, latest: dict[bytes, int]
) -> tuple[int, int]: ...
def filter_plain(
    data: bytes,
    position: int,
    limit: int,
    out: bytearray,
    remembered: dict[bytes, int],
    get: Callable[[bytes], int],
    retain_deletes: bool,
) -> tuple[int, int, int]: ...
def put_digests(
    buffer: bytearray,
    slots: int,
    capacity: int,
    size: int,
    digests: list[bytes],
    offsets: list[int],
) -> tuple[int, int, int]: ...
def get_digests(buffer: bytearray, slots: int, digests: list[bytes]) -> list[int]: ...
def map_inner(
    inner: bytes, magic: int, wrapper_offset: int, latest: dict[bytes, int]
) -> tuple[int, int, int] | None: ...
def filter_inner(
    inner: bytes,
    magic: int,
    wrapper_offset: int,
    remembered: dict[bytes, int],
    get: Callable[[bytes], int],
    remember: Callable[[list[bytes]], None],
    retain_deletes: bool,
) -> tuple[int, int, bytes | None, int, int] | None: ...
def map_records(
    section: bytes | memoryview, count: int, base_offset: int, latest: dict[bytes, int]
) -> int | None: ...
def filter_records(
    section: bytes | memoryview,
    count: int,
    base_offset: int,
    first_timestamp: int,
    log_append_time: bool,
    remembered: dict[bytes, int],
    get: Callable[[bytes], int],
    remember: Callable[[list[bytes]], None],
    retain_deletes: bool,
) -> tuple[int, bytes | None, int, int] | None: ...
