"""FileSnapshotStore: durable snapshots as files, one directory per saga, named by content hash.

``put`` writes the blob to a temporary file, fsyncs it, renames it to its SHA-256 and
fsyncs the directory (and the root, when the saga's directory is new): when it returns,
the snapshot survives a kill -9 or a power cut. A blob already stored under its hash (and
still matching it) is not written again. ``get`` checks the bytes against the hash they are named by.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from agent_saga.engine.snapshot import check_digest, check_saga_id, digest_of
from agent_saga.errors import CompensationError
from agent_saga.log.fs import FILE_MODE, fsync_dir, private_dir

__all__ = ["FileSnapshotStore"]


class FileSnapshotStore:
    """Snapshots under ``root`` (created 0700). ``name`` is how the log refers to this store."""

    def __init__(self, root: str | os.PathLike[str], *, name: str = "file") -> None:
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"FileSnapshotStore needs a non-empty name=, got {name!r}")
        self.root = Path(root).absolute()
        self.name = name

    def __repr__(self) -> str:
        return f"FileSnapshotStore({str(self.root)!r}, name={self.name!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FileSnapshotStore) and (other.root, other.name) == (self.root, self.name)

    def __hash__(self) -> int:
        return hash((self.root, self.name))

    def _dir(self, saga_id: str) -> Path:
        return self.root / check_saga_id(saga_id)

    def put(self, saga_id: str, data: bytes) -> str:
        digest = digest_of(data)
        folder = self._dir(saga_id)
        target = folder / digest
        try:
            if digest_of(target.read_bytes()) == digest:
                # Content-addressed: the same bytes are there. The put that renamed them may have
                # died before its directory fsync, so that one is repeated (and it is cheap).
                fsync_dir(folder)
                fsync_dir(self.root)
                return digest
        except FileNotFoundError:
            pass  # (a blob that no longer matches its name is written again, below)
        created = not folder.exists()
        private_dir(folder)
        temp = folder / f".{digest}.{secrets.token_hex(4)}.tmp"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, target)
        fsync_dir(folder)
        if created:
            fsync_dir(self.root)
        return digest

    def get(self, saga_id: str, digest: str) -> bytes:
        path = self._dir(saga_id) / check_digest(digest)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise KeyError(f"snapshot {digest} of saga {saga_id} is not in {self!r}") from None
        if digest_of(data) != digest:
            raise CompensationError(f"snapshot {digest} of saga {saga_id} in {self!r} does not match its hash")
        return data

    def sagas(self) -> list[str]:
        try:
            entries = sorted(os.listdir(self.root))
        except FileNotFoundError:
            return []
        found = []
        for entry in entries:
            try:
                check_saga_id(entry)
            except ValueError:
                continue  # not ours: a GC never touches it
            if (self.root / entry).is_dir():
                found.append(entry)
        return found

    def delete_saga(self, saga_id: str) -> int:
        folder = self._dir(saga_id)
        try:
            names = os.listdir(folder)
        except FileNotFoundError:
            return 0
        count = 0
        for entry in names:
            (folder / entry).unlink(missing_ok=True)
            count += not entry.startswith(".")
        fsync_dir(folder)
        folder.rmdir()
        fsync_dir(self.root)
        return count
