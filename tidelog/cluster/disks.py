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

import contextlib
import json
import os
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass, replace
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


# -- a compose broker's small disk ----------------------------------------------------------------
#
# The engine's volume stays as it is; the small filesystem is mounted over the log dir inside the
# broker's container, in its mount namespace only (entered from the host with nsenter). When the
# container goes, for whatever reason (the broker halted, `docker compose down`, `cluster down`),
# its namespace goes, the mount with it, and the loop device, set to clear itself once unused,
# is freed: nothing is left on the host but the image file in the cluster directory, which
# ``release_volume_disks`` deletes. What the broker wrote there is copied back into its volume
# by ``restore_volume`` (the image is kept until the copy is whole, so a killed copy is made
# again from it).

VOLUME_DISKS_FILE = "volume-disks.json"
IN_CONTAINER_DEVICE = "/dev/tidelog-small-disk"  # made, mounted and removed at once
LOOP_RELEASE_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class VolumeDisk:
    """A compose broker's log dir on ``image`` (in the cluster directory); ``volume`` is the
    broker's log volume on this host, ``staging`` where the image is mounted on this host while
    it is filled or read back."""

    image: str
    volume: str
    staging: str
    # whether a container was given the image: only then does the image hold what the broker
    # wrote, to be copied back (before, it may hold a part of a copy that was cut short)
    given: bool = False


def _volume_records(directory: Path) -> list[VolumeDisk]:
    path = directory / VOLUME_DISKS_FILE
    if not path.exists():
        return []
    return [VolumeDisk(**entry) for entry in json.loads(path.read_text())]


def _save_volume_records(directory: Path, disks: list[VolumeDisk]) -> None:
    path = directory / VOLUME_DISKS_FILE
    if not disks:
        path.unlink(missing_ok=True)
        return
    replace_text(path, json.dumps([asdict(disk) for disk in disks], indent=2) + "\n")


def loops_of(image: str) -> list[str]:
    """The loop devices attached to ``image`` (``losetup -j``)."""
    done = subprocess.run(["losetup", "-j", image], capture_output=True, text=True, check=False)
    return [line.split(":", 1)[0] for line in done.stdout.splitlines() if line.strip()]


def _copy_contents(source: Path, target: Path) -> None:
    """Every entry of ``source`` into ``target``, owners and modes kept (``cp -a``), but the
    ballast and ext4's lost+found."""
    for entry in sorted(source.iterdir()):
        if entry.name not in (BALLAST, "lost+found"):
            _run(["cp", "-a", str(entry), str(target)])


def make_small_volume(
    cluster_directory: Path, service: str, volume: Path, headroom: int
) -> VolumeDisk:
    """An ext4 image holding a copy of the (stopped) broker's ``volume`` with ``headroom``
    bytes free, its root owned as the volume's is; recorded before it is made."""
    if os.geteuid() != 0:
        raise DiskError("disk_full needs root: it mounts a filesystem image on a loop device")
    disk = VolumeDisk(
        str(cluster_directory / service / "small-disk.img"),
        str(volume),
        str(cluster_directory / service / "small-disk"),
    )
    _save_volume_records(cluster_directory, [*_volume_records(cluster_directory), disk])
    staging = Path(disk.staging)
    staging.mkdir(parents=True, exist_ok=True)
    with open(disk.image, "wb") as image:
        image.truncate(_size(volume) + headroom + IMAGE_OVERHEAD)
    _run(["mkfs.ext4", "-q", "-F", "-m", "0", disk.image])
    _run(["mount", "-o", "loop", disk.image, disk.staging])  # its loop device clears on umount
    try:
        owner = volume.stat()
        os.chown(staging, owner.st_uid, owner.st_gid)
        os.chmod(staging, owner.st_mode & 0o7777)
        _copy_contents(volume, staging)
        free = os.statvfs(staging).f_bavail * os.statvfs(staging).f_frsize
        if free > headroom:
            with open(staging / BALLAST, "wb") as ballast:
                os.posix_fallocate(ballast.fileno(), 0, free - headroom)
                os.fsync(ballast.fileno())
    finally:
        _run(["umount", disk.staging])
    return disk


def mount_in_container(cluster_directory: Path, disk: VolumeDisk, pid: int, target: str) -> None:
    """The image mounted over ``target`` in the mount namespace of the container whose first
    process is ``pid`` (host's id), recorded as given first. The loop device is attached on the
    host and told to clear itself once unused (``losetup -d`` of a mounted device), so the
    container's end frees it."""
    given = replace(disk, given=True)
    _save_volume_records(
        cluster_directory,
        [given if d == disk else d for d in _volume_records(cluster_directory)],
    )
    loop = subprocess.run(
        ["losetup", "--find", "--show", disk.image], capture_output=True, text=True, check=False
    )
    if loop.returncode != 0:
        raise DiskError(f"losetup --find --show {disk.image}: {loop.stderr.strip()}")
    device = loop.stdout.strip()
    try:
        number = os.stat(device).st_rdev
        # a device node of the container's own /dev (the engine gives it none of the host's
        # loop devices), made by the host's root: the container's device rules bind its own
        # processes, not this one
        script = (
            f"mknod {IN_CONTAINER_DEVICE} b {os.major(number)} {os.minor(number)} && "
            f"mount -t ext4 {IN_CONTAINER_DEVICE} {target}; done=$?; "
            f"rm -f {IN_CONTAINER_DEVICE}; exit $done"
        )
        _run(["nsenter", f"--mount=/proc/{pid}/ns/mnt", "--", "sh", "-c", script])
    finally:
        _run(["losetup", "-d", device])  # mounted: detached once the mount goes


def restore_volume(cluster_directory: Path, disk: VolumeDisk) -> None:
    """What the broker wrote on its small disk copied back into its volume, once no container
    holds the image any more (its namespace went, and with it the mount and the loop device);
    then the image goes. An image no container was given (the command was killed while it
    made it) leaves the volume as it was; a volume that is gone (``docker compose down
    --volumes``) takes nothing back."""
    staging, volume = Path(disk.staging), Path(disk.volume)
    if mounted(staging):  # a command killed while it filled the image
        _run(["umount", disk.staging])
    deadline = time.monotonic() + LOOP_RELEASE_TIMEOUT_S
    while loops_of(disk.image):
        if time.monotonic() > deadline:
            raise DiskError(f"{disk.image} is still attached to {loops_of(disk.image)}")
        time.sleep(0.2)
    if disk.given and Path(disk.image).exists() and volume.is_dir():
        _run(["mount", "-o", "loop,ro", disk.image, disk.staging])
        try:
            for entry in list(volume.iterdir()):
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
            _copy_contents(staging, volume)
            os.sync()
        finally:
            _run(["umount", disk.staging])
    Path(disk.image).unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        staging.rmdir()
    _save_volume_records(
        cluster_directory, [d for d in _volume_records(cluster_directory) if d.image != disk.image]
    )


def release_volume_disks(cluster_directory: Path, progress=lambda _: None) -> None:
    """Every recorded small disk of a compose broker restored into its volume (after a killed
    command too). The broker's containers must be gone or stopped: a loop device still held
    by a running container's mount is waited for."""
    for disk in _volume_records(cluster_directory):
        progress(f"removing the small disk {disk.image} (its data back in {disk.volume})")
        restore_volume(cluster_directory, disk)
