"""Every file and directory daskjoin writes appears only complete: one module for atomic writes.

- :func:`temp_path`: a hidden sibling name unique to this call (thread, process and host),
  so two writers never share a temporary file.
- :func:`atomic_file`: write under a temporary name, rename into place.
- :func:`publish_dir`: move a finished directory into place, atomically replacing an
  old one where the file system can exchange two names (Linux ``renameat2``).
- :class:`FileLock`: an exclusive ``flock`` on a lock file beside what it guards.  flock
  locks belong to an open file description, so two threads of one process exclude each
  other as two processes do.
- :func:`build_once`: build a cached item under its lock, so concurrent joins (threads or
  processes) build it once and readers only ever see it complete.

Temporary names all contain ``.tmp-`` after the final name, so whoever holds an item's
lock can tell the leftovers of a killed writer (:func:`remove_temps`).
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import json
import os
import shutil
import socket
import time
import uuid

from ..caches import CACHE

try:
    import fcntl
except ImportError:  # Windows: locks by exclusive creation (FileLock)
    fcntl = None

TEMP_MARK = ".tmp-"


def temp_path(final: str, tag: str | None = None) -> str:
    """A hidden sibling of ``final`` that no other writer uses: ``.NAME.tmp-<tag>``."""
    folder, name = os.path.split(os.path.abspath(final))
    return os.path.join(folder, f".{name}{TEMP_MARK}{tag or uuid.uuid4().hex[:12]}")


def is_temp_of(entry: str, name: str) -> bool:
    """Whether directory entry ``entry`` is a temporary of the item called ``name`` (hidden names only)."""
    return entry.startswith(f".{name}{TEMP_MARK}")


def remove_path(path: str) -> None:
    """Remove a file or a directory tree; missing is fine."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
        if os.path.isdir(path):  # a writer still adding files: one more pass
            shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


OLD_TAG = "old-"


def remove_temps(final: str, keep: str | None = None) -> list[str]:
    """Remove the temporaries of ``final`` left by killed writers (all but the path ``keep``); call only while
    holding its lock.

    An old version renamed aside by :func:`publish_dir` is put back first where ``final`` is
    missing (a writer killed between its two renames): it is the only copy.
    """
    folder, name = os.path.split(os.path.abspath(final))
    removed = []
    with contextlib.suppress(FileNotFoundError):
        entries = sorted(os.listdir(folder))
        for entry in entries:
            if is_temp_of(entry, name) and entry[len(name) + 1 + len(TEMP_MARK):].startswith(OLD_TAG) \
                    and not os.path.lexists(final):
                os.rename(os.path.join(folder, entry), final)
        kept = None if keep is None else os.path.basename(os.path.abspath(keep))
        for entry in entries:
            if is_temp_of(entry, name) and entry != kept and os.path.lexists(os.path.join(folder, entry)):
                remove_path(os.path.join(folder, entry))
                removed.append(entry)
    return removed


@contextlib.contextmanager
def sole_writer(final: str):
    """Hold ``final``'s lock while a store is written under a temporary name and published.

    A second writer of the same path fails at once (:class:`LockBusy`) instead of racing to the
    rename; temporaries that killed writers left (they never got to remove them) are removed
    first, which only the lock's holder may do.
    """
    lock = FileLock(lock_path(final), blocking=False)
    lock.acquire()
    try:
        remove_temps(final)
        yield
    finally:
        lock.release()


def busy_message(path: str, exc: LockBusy) -> str:
    """The refusal of a second writer of ``path``: who holds it, and what to do."""
    try:
        info = json.loads(exc.holder) if exc.holder else {}
    except ValueError:
        info = {}
    who = f"pid {info.get('pid')} on {info.get('host')}" if info else "its lock file is held"
    hint = "wait for it to finish or choose another path"
    if exc.undecidable:
        hint += (f"; this file system has no flock, so a writer that died on another host leaves its lock "
                 f"behind: if that writer is gone, remove {exc.filename!r}")
    return f"output path {path!r} is being written by another writer ({who}); {hint}"


@contextlib.contextmanager
def atomic_file(final: str):
    """Yield a temporary path to write; on success it is renamed to ``final``, on failure removed."""
    tmp = temp_path(final)
    try:
        yield tmp
        os.replace(tmp, final)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)


def write_bytes(final: str, data: bytes) -> None:
    with atomic_file(final) as tmp, open(tmp, "wb") as f:
        f.write(data)


# --------------------------------------------------------------------------- replacing directories

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _renameat2():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        func = libc.renameat2
    except (OSError, AttributeError):
        return None
    func.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    func.restype = ctypes.c_int
    return func


_EXCHANGE = {"func": _renameat2()}


def exchange(a: str, b: str) -> bool:
    """Swap two existing paths in one atomic step; False where the system or file system cannot."""
    func = _EXCHANGE["func"]
    if func is None:
        return False
    if func(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
        return False
    raise OSError(err, os.strerror(err), a)


def publish_dir(tmp: str, final: str, *, replace: bool) -> str | None:
    """Move the finished ``tmp`` to ``final``.

    Where ``final`` exists and ``replace`` is set, readers of ``final`` see either the old
    contents or the new, never a mix: the two are exchanged atomically where the file
    system can (Linux ext4, xfs, btrfs, tmpfs); elsewhere (NFS, other systems) the old one
    is renamed aside first, so ``final`` is absent for the moment between two renames.
    Raises FileExistsError where ``final`` exists and ``replace`` is not set.  Returns where
    the old contents now are (the caller removes them: :func:`remove_path`), or None.  The new
    contents are in place when it returns, so an interrupt during that removal loses nothing.
    """
    if not os.path.lexists(final):
        try:
            os.rename(tmp, final)
            return None
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.EISDIR, errno.ENOTDIR):
                raise
    if not replace:
        raise FileExistsError(errno.EEXIST, "appeared while it was being written", final)
    if os.path.isdir(final) and os.path.isdir(tmp) and exchange(tmp, final):
        return tmp  # now the old contents
    old = temp_path(final, f"{OLD_TAG}{uuid.uuid4().hex[:8]}")
    os.rename(final, old)
    try:
        os.rename(tmp, final)
    except BaseException:
        os.rename(old, final)  # put the previous contents back
        raise
    return old


def replace_dir(tmp: str, final: str, *, replace: bool) -> None:
    """:func:`publish_dir`, then the old contents removed."""
    old = publish_dir(tmp, final, replace=replace)
    if old is not None:
        remove_path(old)


# --------------------------------------------------------------------------- locks


class LockBusy(OSError):
    """Another writer holds the lock; ``holder`` is the note it left (who, since when)."""

    def __init__(self, path: str, holder: str, undecidable: bool = False):
        super().__init__(errno.EAGAIN, "locked by another writer", path)
        self.holder = holder
        #: the lock is a file's existence (no flock here) and its holder is on another host: whether that
        #: process still runs cannot be told from here, so a lock its death left behind stays until removed
        self.undecidable = undecidable


class FileLock:
    """An exclusive lock on ``path`` (created if missing, removed on release).

    ``blocking=False`` raises :class:`LockBusy` at once if another holder has it.  The lock
    file is removed when released; a waiter that locked a file already removed tries again,
    so two holders can never both believe they hold it.
    """

    def __init__(self, path: str, *, blocking: bool = True, note: str = ""):
        self.path, self.blocking, self.note = path, blocking, note
        self._fd: int | None = None

    def acquire(self) -> "FileLock":
        if not _flock_works(os.path.dirname(os.path.abspath(self.path))):
            return self._acquire_by_creation()
        flags = fcntl.LOCK_EX | (0 if self.blocking else fcntl.LOCK_NB)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, flags)
            except BlockingIOError:
                holder = _read_note(fd)
                os.close(fd)
                raise LockBusy(self.path, holder) from None
            except BaseException:
                os.close(fd)
                raise
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)  # the previous holder removed it between our open and our lock
        os.ftruncate(fd, 0)
        os.pwrite(fd, self._note().encode(), 0)
        self._fd = fd
        return self

    def _note(self) -> str:
        """Who holds the lock: the caller's note, else this host and process (to tell a stale lock)."""
        return self.note or json.dumps({"pid": os.getpid(), "host": socket.gethostname()})

    def _acquire_by_creation(self) -> "FileLock":
        """Where flock is missing: the lock is the file's exclusive creation; a lock left by a dead
        process of this host is taken over."""
        while True:
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                holder = _read_file(self.path)
                if _stale(holder):
                    # take the stale file away under a name of our own, then look again at what we
                    # took: a waiter that got there first may have put its own lock there meanwhile
                    aside = temp_path(self.path, f"stale-{uuid.uuid4().hex[:8]}")
                    try:
                        os.rename(self.path, aside)
                    except FileNotFoundError:
                        continue
                    if not _stale(_read_file(aside)):
                        with contextlib.suppress(FileExistsError):
                            os.link(aside, self.path)  # a live holder's lock: put it back
                    with contextlib.suppress(FileNotFoundError):
                        os.remove(aside)
                    continue
                if not self.blocking:
                    raise LockBusy(self.path, holder, undecidable=_other_host(holder)) from None
                time.sleep(0.2)
                continue
            os.write(fd, self._note().encode())
            self._fd = fd
            return self

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.path)  # while still locked: a waiter on this file will see it is gone
        os.close(fd)

    def __enter__(self) -> "FileLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


_NO_FLOCK = {errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL}


def _flock_works(folder: str) -> bool:
    """Whether flock works in ``folder`` (not on Windows, Lustre without -o flock, some NFS and FUSE
    mounts), tried once per file system on a file of our own."""
    if fcntl is None:
        return False
    try:
        device = os.stat(folder).st_dev
    except OSError:
        return True  # let the real attempt report the problem
    known = CACHE.get("flock", device)  # device id -> whether flock works on that file system
    if known is None:
        probe = temp_path(os.path.join(folder, "flock-probe"))
        try:
            fd = os.open(probe, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        except OSError:
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            known = True
        except OSError as exc:
            known = exc.errno not in _NO_FLOCK
        finally:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.remove(probe)
        CACHE.put("flock", device, known)
    return known


def _read_file(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(512).decode(errors="replace").strip()
    except OSError:
        return ""


def _other_host(holder: str) -> bool:
    """A lock note naming a process of another host (or none we can read)."""
    try:
        return json.loads(holder)["host"] != socket.gethostname()
    except (ValueError, KeyError, TypeError):
        return True


def _stale(holder: str) -> bool:
    """A lock note naming a process of this host that no longer runs."""
    try:
        info = json.loads(holder)
        pid, host = int(info["pid"]), info["host"]
    except (ValueError, KeyError, TypeError):
        return False
    if host != socket.gethostname():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _read_note(fd: int) -> str:
    try:
        return os.pread(fd, 512, 0).decode(errors="replace").strip()
    except OSError:
        return ""


def lock_path(final: str) -> str:
    """The lock file that guards ``final``: a hidden sibling."""
    folder, name = os.path.split(os.path.abspath(final))
    return os.path.join(folder, f".{name}.lock")


def build_once(final: str, exists, build):
    """``build(final)`` unless ``exists(final)``, under ``final``'s lock.

    Concurrent callers (threads or processes) wait for the one building, then find the item
    there; ``build`` must write under :func:`temp_path` names and publish with a rename, so
    a reader without the lock never sees a half-written item.  Temporaries of killed
    builders are removed first.
    """
    if exists(final):
        return False
    with FileLock(lock_path(final)):
        if exists(final):
            return False
        remove_temps(final)
        build(final)
        return True
