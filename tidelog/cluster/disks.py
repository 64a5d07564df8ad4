"""A broker's log dir on a small filesystem that fills up: an ext4 image on a loop device.

    DIR/disks.json      each small disk, written down before it is made or mounted, so that
                        ``release_all`` (``cluster down``) unmounts it after a killed command

An ext4 image mounted with ``-o loop`` rather than a tmpfs with a size: the broker's writes go
through a real disk filesystem's block allocation and get its ENOSPC, and what is on the image
is on a block device, not in memory. The log dir's contents are copied onto the image (the
originals set aside beside it), and a ballast file leaves ``headroom`` bytes free. ``restore``
copies what the broker wrote there back onto the big disk, as a replaced disk would hold it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from tidelog.files import replace_text

DISKS_FILE = "disks.json"
BALLAST = ".ballast"  # not a partition directory: the log manager passes it over
IMAGE_OVERHEAD = 4 << 20  # ext4's own metadata on a small image, and some room


class DiskError(RuntimeError):
    pass


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise DiskError(f"{' '.join(argv)}: {done.stderr.strip() or done.stdout.strip()}")


def mounted(path: Path) -> bool:
    target = str(path.resolve())
    with open("/proc/self/mounts") as mounts:
        return any(line.split()[1] == target for line in mounts)


@dataclass(frozen=True)
class SmallDisk:
    """``log_dir`` mounted from ``image``; its former contents kept in ``set_aside``."""

    image: str
    log_dir: str
    set_aside: str


def _records(directory: Path) -> list[SmallDisk]:
    path = directory / DISKS_FILE
    if not path.exists():
        return []
    return [SmallDisk(**entry) for entry in json.loads(path.read_text())]


def _save(directory: Path, disks: list[SmallDisk]) -> None:
    path = directory / DISKS_FILE
    if not disks:
        path.unlink(missing_ok=True)
        return
    replace_text(path, json.dumps([asdict(disk) for disk in disks], indent=2) + "\n")


def _size(directory: Path) -> int:
    return sum(f.stat().st_size for f in directory.rglob("*") if f.is_file())


def make_small(cluster_directory: Path, log_dir: Path, headroom: int) -> SmallDisk:
    """Moves the (stopped) broker's ``log_dir`` onto an ext4 image with ``headroom`` bytes
    free once its contents are copied there."""
    if os.geteuid() != 0:
        raise DiskError("disk_full needs root: it mounts a filesystem image on a loop device")
    disk = SmallDisk(
        str(log_dir.parent / "small-disk.img"),
        str(log_dir),
        str(log_dir.parent / (log_dir.name + ".set-aside")),
    )
    _save(cluster_directory, [*_records(cluster_directory), disk])
    os.rename(log_dir, disk.set_aside)
    log_dir.mkdir()
    with open(disk.image, "wb") as image:
        image.truncate(_size(Path(disk.set_aside)) + headroom + IMAGE_OVERHEAD)
    _run(["mkfs.ext4", "-q", "-F", "-m", "0", disk.image])
    _run(["mount", "-o", "loop", disk.image, str(log_dir)])
    shutil.copytree(disk.set_aside, log_dir, dirs_exist_ok=True)
    free = os.statvfs(log_dir).f_bavail * os.statvfs(log_dir).f_frsize
    if free > headroom:
        with open(log_dir / BALLAST, "wb") as ballast:
            os.posix_fallocate(ballast.fileno(), 0, free - headroom)
            os.fsync(ballast.fileno())
    return disk


def restore(cluster_directory: Path, disk: SmallDisk) -> None:
    """The broker's log dir back on the big disk, with what it wrote on the small one (the
    broker must not be running); the image goes."""
    log_dir = Path(disk.log_dir)
    if mounted(log_dir):
        written = log_dir.parent / (log_dir.name + ".from-small-disk")
        shutil.copytree(log_dir, written, ignore=shutil.ignore_patterns(BALLAST, "lost+found"))
        _run(["umount", str(log_dir)])
        log_dir.rmdir()
        os.rename(written, log_dir)
        shutil.rmtree(disk.set_aside, ignore_errors=True)
    elif Path(disk.set_aside).exists():  # made but never mounted: the originals go back
        shutil.rmtree(log_dir, ignore_errors=True)
        os.rename(disk.set_aside, log_dir)
    Path(disk.image).unlink(missing_ok=True)
    _save(cluster_directory, [d for d in _records(cluster_directory) if d != disk])


def release_all(cluster_directory: Path, progress=lambda _: None) -> None:
    """Every recorded small disk restored (after a killed command too)."""
    for disk in _records(cluster_directory):
        progress(f"unmounting the small disk of {disk.log_dir}")
        restore(cluster_directory, disk)
