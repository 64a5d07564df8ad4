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
