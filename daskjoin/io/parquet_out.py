"""Parquet output with a commit protocol: each run owns its output until it commits.

A run (:class:`OutputRun`) takes the output path's lock (a second writer fails at once,
saying who holds it), writes every partition into its own staging directory (a hidden
sibling named after its run id), and commits by moving that directory into place only
when every part file its tasks reported is there with the reported size and nothing
else is.  ``_SUCCESS`` (JSON: run id, files, row counts, total) is written last inside the
staging directory, so a directory with ``_SUCCESS`` at the output path is always one
run's complete output.  With ``overwrite`` the previous output stays readable until the
new one replaces it (see :func:`daskjoin.io.commit.publish_dir`).  A killed run leaves
only its staging directory, which the next run to the same path removes, unless it resumes it.

**Resume.**  A run writes its *record* (what was joined: inputs' fingerprints, parameters, the
plan's partitions) into its staging directory as ``_RUN`` when it starts, and appends each
finished partition's files to ``_DONE``.  An interrupted run (Ctrl-C, SIGTERM) keeps its
staging directory, as a killed one does; a run with ``resume=True`` whose record equals that
one's adopts it and computes only the partitions not recorded in ``_DONE`` with their files
present at the recorded sizes, and refuses (naming what differs) when the records differ.  A
committed output whose ``_SUCCESS`` holds an equal record makes a resumed run a no-op.

Part files have deterministic names (``part-PPPPP-KKKKK.parquet``: partition, piece of a fixed
number of rows) and are written under a temporary name and renamed, so a retried task
rewrites the same files; a partition's pieces are written by several threads at once.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor, wait

import numpy as np

from ..cores import writer_threads
from ..validation import InputError
from . import commit

SUCCESS = "_SUCCESS"
PART_PREFIX = "part-"
RUN_RECORD = "_RUN"  # a run's record, in its staging directory (not published)
DONE_LOG = "_DONE"  # one JSON line per finished partition (not published)
STAGING_TAG = "run-"


DISTANCE = ("dist", "float32")


def value_fields(value: tuple | None) -> list[tuple[str, np.dtype]]:
    """The columns after i and j of a join's value ``(name, dtype)``: itself, or one per field of a record
    dtype (the kNN-join's ``dist`` and ``rank`` travel as one 8-byte record, sorted and spilled as one value)."""
    if value is None:
        return []
    dtype = np.dtype(value[1])
    if dtype.names:
        return [(name, dtype.fields[name][0]) for name in dtype.names]
    return [(value[0], dtype)]


def value_columns(value: tuple | None, v) -> list[np.ndarray]:
    """The arrays of :func:`value_fields` from a batch's value array ``v``."""
    if value is None:
        return []
    dtype = np.dtype(value[1])
    if dtype.names:
        return [np.ascontiguousarray(v[name]) for name in dtype.names]
    return [np.asarray(v, dtype)]


def schema(value: tuple | None = DISTANCE):
    """Columns i, j (int64) and the value's columns (:func:`value_fields`): a ``pyarrow.Schema``."""
    import pyarrow as pa  # here: a count or a frame never loads pyarrow

    fields = [pa.field("i", pa.int64(), nullable=False), pa.field("j", pa.int64(), nullable=False)]
    fields += [pa.field(name, pa.from_numpy_dtype(dtype), nullable=False) for name, dtype in value_fields(value)]
    return pa.schema(fields)


def part_name(index: int, piece: int = 0) -> str:
    """``part-PPPPP-KKKKK.parquet``: partition ``index``'s piece ``piece`` (names sort in pair order)."""
    return f"{PART_PREFIX}{index:05d}-{piece:05d}.parquet"


#: How pairs are encoded (benchmarks/bench_parquet.py, results/parquet-encodings-vm-2026-11-25.json: 15.6M
#: sorted pairs, one thread): delta-encoded ids without dictionaries write at 38-40M pairs/s in 6.6-6.7 bytes a
#: pair, where plain or dictionary ids under snappy write 24-26M pairs/s in 9.5; snappy on top of delta costs
#: nothing measurable to write and halves the read time (0.09 s against 0.18 s uncompressed); zstd saves
#: another 10% of space at 25% of the write speed.
ENCODING = dict(compression="snappy", use_dictionary=False,
                column_encoding={"i": "DELTA_BINARY_PACKED", "j": "DELTA_BINARY_PACKED"})


def write_piece(path: str, piece, value: tuple | None = DISTANCE) -> int:
    """Write one piece of pairs ``(i, j, value)`` as one file of one row group, atomically; return its bytes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    i, j, v = piece
    sch = schema(value)
    cols = [pa.array(np.asarray(i, np.int64)), pa.array(np.asarray(j, np.int64))]
    cols += [pa.array(col) for col in value_columns(value, v)]
    with commit.atomic_file(path) as tmp:
        pq.write_table(pa.Table.from_arrays(cols, schema=sch), tmp, row_group_size=max(1, len(i)), **ENCODING)
        return os.path.getsize(tmp)


_POOL: dict = {}
_POOL_LOCK = threading.Lock()


def _pool() -> tuple[ThreadPoolExecutor, threading.BoundedSemaphore]:
    """This process's writer threads, shared by its tasks (pyarrow releases the GIL while it encodes and
    writes), and its slots: at most one piece per writer thread is in flight in the whole process, so
    the pieces held for writing (pinned host memory, for GPU tasks) stay bounded however many tasks run."""
    size = writer_threads()
    with _POOL_LOCK:
        pool = _POOL.get(size)
        if pool is None:
            pool = _POOL[size] = (ThreadPoolExecutor(max_workers=size, thread_name_prefix="daskjoin-writer"),
                                  threading.BoundedSemaphore(size))
        return pool


def write_partition(out_dir: str, index: int, pieces, *, value: tuple | None = DISTANCE) -> list[dict]:
    """Write the sorted ``(i, j, value)`` pieces of partition ``index``, one file each, several at a time.

    Each piece goes to ``part_name(index, k)`` on a writer thread while the next piece is being
    produced; at most :func:`writer_threads` pieces are in flight in the process.  ``value`` names the third
    column and its dtype (None: no third column).  A partition without pairs writes one empty
    file (its schema).  On failure the files this call wrote are removed, so a partition's files
    are all there or none.  Returns the manifest entries (file, rows, bytes, seconds spent writing),
    in piece order.
    """
    pool, slots = _pool()
    written: list[tuple[str, int, Future]] = []

    def run(path, piece):
        try:
            start = time.perf_counter()
            size = write_piece(path, piece, value)
            return size, time.perf_counter() - start
        finally:
            slots.release()

    try:
        for k, piece in enumerate(pieces):
            name = part_name(index, k)
            slots.acquire()
            try:
                future = pool.submit(run, os.path.join(out_dir, name), piece)
            except BaseException:
                slots.release()
                raise
            written.append((name, len(piece[0]), future))
        if not written:
            empty = np.zeros(0, np.int64)
            name = part_name(index, 0)
            start = time.perf_counter()
            size = write_piece(os.path.join(out_dir, name), (empty, empty, empty), value)
            return [{"file": name, "rows": 0, "bytes": int(size), "write_s": time.perf_counter() - start}]
        done = [(name, rows, future.result()) for name, rows, future in written]
        return [{"file": name, "rows": int(rows), "bytes": int(size), "write_s": seconds}
                for name, rows, (size, seconds) in done]
    except BaseException:
        for _, _, future in written:
            if future.cancel():  # never ran: its slot is given back here
                slots.release()
        wait([f for _, _, f in written])
        for name, _, _ in written:
            commit.remove_path(os.path.join(out_dir, name))
        raise


# the single-file names of earlier versions (part-NNNNN.parquet) still count as daskjoin output
PART_RE = re.compile(r"^part-\d{5,}(-\d{5,})?\.parquet$")
TEMP_RE = re.compile(r"^\.(part-\d{5,}(-\d{5,})?\.parquet|_SUCCESS)\.tmp-[0-9a-f]+$")


def is_output_entry(name: str) -> bool:
    """Whether a directory entry is something a daskjoin Parquet output (or a killed task of one) holds."""
    return name == SUCCESS or bool(PART_RE.match(name)) or bool(TEMP_RE.match(name))


def check_replaceable(path: str) -> None:
    """Refuse to replace anything but a daskjoin output directory (overwrite never deletes data)."""
    if not os.path.isdir(path) or os.path.islink(path):
        raise InputError(
            f"output path {path!r} exists and is not a directory daskjoin wrote; overwrite replaces only "
            "daskjoin outputs: remove it yourself or choose another path"
        )
    foreign = sorted(name for name in os.listdir(path) if not is_output_entry(name))
    if foreign:
        shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        raise InputError(
            f"output path {path!r} exists and is not a daskjoin output (it holds {shown}); overwrite replaces "
            "only daskjoin outputs: remove it yourself or choose another path"
        )
    if not os.access(path, os.W_OK | os.X_OK):
        raise InputError(f"output path {path!r} exists and cannot be replaced (permission denied)")


class OutputBusy(InputError):
    """Another run is writing the same output path."""


class OutputRun:
    """One run's ownership of an output directory, from its start to its commit (or abort).

    Use as a context manager: leaving it with an exception aborts (the staging directory
    is removed, the old output, if any, is untouched); :meth:`commit` publishes.
    """

    def __init__(self, path: str, overwrite: bool, resume: bool = False):
        self.path = os.path.abspath(path)
        self.overwrite = bool(overwrite)
        self.resume = bool(resume)
        self.run_id = uuid.uuid4().hex[:12]
        self.staging = commit.temp_path(self.path, f"{STAGING_TAG}{self.run_id}")
        note = json.dumps({"run": self.run_id, "pid": os.getpid(), "host": socket.gethostname(),
                           "started": time.strftime("%Y-%m-%d %H:%M:%S")})
        self._lock = commit.FileLock(commit.lock_path(self.path), blocking=False, note=note)
        self._open = False
        #: what a resumed run found: the committed manifest at the path, or an interrupted run's record
        self.finished: dict | None = None
        self.previous: dict | None = None
        self._previous_dir: str | None = None
        #: partition index -> its manifest entries, recorded as finished (by an interrupted run, then this one)
        self.done: dict[int, list[dict]] = {}
        self.record: dict | None = None

    def __enter__(self) -> "OutputRun":
        try:
            self._lock.acquire()
        except commit.LockBusy as exc:
            hint = "wait for it to finish or choose another path"
            if exc.undecidable:  # no flock on this file system: a dead run elsewhere cannot be detected from here
                hint += (f"; this file system has no flock, so a run that died on another host leaves its lock "
                         f"behind: if that run is gone, remove {exc.filename!r}")
            raise OutputBusy(
                f"output path {self.path!r} is being written by another daskjoin run ({_holder(exc)}); {hint}"
            ) from None
        try:
            if self.resume and os.path.isfile(os.path.join(self.path, SUCCESS)):
                self.finished = read_manifest(self.path)
            if os.path.lexists(self.path):  # looked at again now that no one else can commit
                if not self.overwrite and self.finished is None:
                    raise InputError(f"output path {self.path!r} already exists (another run wrote it meanwhile); "
                                     "choose another path or pass overwrite=True")
                if self.overwrite:
                    check_replaceable(self.path)
            if self.resume:
                self._find_previous()  # kept until start() knows whether this run continues it
            commit.remove_temps(self.path, keep=self._previous_dir)  # staging directories of killed runs
            os.mkdir(self.staging)
        except BaseException:
            self._lock.release()
            raise
        self._open = True
        return self

    def _find_previous(self) -> None:
        """The newest staging directory of an earlier run of this path that left its record."""
        folder, name = os.path.split(self.path)
        found = []
        for entry in os.listdir(folder):
            if commit.is_temp_of(entry, name) and entry[len(name) + 1 + len(commit.TEMP_MARK):].startswith(STAGING_TAG):
                record = _read_json(os.path.join(folder, entry, RUN_RECORD))
                if record is not None:
                    found.append((os.path.getmtime(os.path.join(folder, entry, RUN_RECORD)), entry, record))
        if found:
            _, entry, self.previous = max(found)
            self._previous_dir = os.path.join(folder, entry)

    def start(self, record: dict) -> str:
        """Begin with this run's ``record`` (JSON types only); returns "finished", "resumed" or "new".

        "finished": the committed output holds this very join (nothing to do: :meth:`close_finished`);
        "resumed": an interrupted run of this join is adopted, :attr:`done` lists its finished
        partitions.  Raises :class:`InputError` where a resumed run's record differs from what it
        found, naming the differences.
        """
        record = json.loads(json.dumps(record))  # as it reads back from the file
        self.record = record
        if self.previous is not None and self.previous == record:
            # an interrupted run of this very join: continued (over a committed output it was replacing)
            if os.path.lexists(self.path):
                check_replaceable(self.path)
                self.overwrite = True
            os.rmdir(self.staging)
            self.staging, self.run_id = self._previous_dir, self._previous_dir.rsplit(STAGING_TAG, 1)[1]
            self.done = self._recorded_done()
            self.finished = None
            return "resumed"
        if self.finished is not None and self.finished.get("record") == record:
            return "finished"
        if not self.overwrite:
            if self.previous is not None:
                _refuse_if_different(self.previous, record, self.path, "the interrupted run")
            if self.finished is not None:
                _refuse_if_different(self.finished.get("record"), record, self.path, "the committed output")
        # starting afresh, as overwrite asks: the other join's interrupted run goes, its output is replaced
        if self._previous_dir is not None:
            commit.remove_path(self._previous_dir)
        self.previous = self._previous_dir = self.finished = None
        commit.write_bytes(os.path.join(self.staging, RUN_RECORD), json.dumps(record, sort_keys=True).encode())
        return "new"

    def _recorded_done(self) -> dict[int, list[dict]]:
        """Partitions the interrupted run finished whose files are all there at their recorded sizes; the files
        of every other partition (and temporaries of killed writers) removed, so that they are written afresh."""
        done = {}
        try:
            with open(os.path.join(self.staging, DONE_LOG)) as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            lines = []
        for line in lines:
            try:
                item = json.loads(line)
                done[int(item["partition"])] = list(item["files"])
            except (ValueError, KeyError, TypeError):
                continue  # a line cut short by a kill
        keep = {}
        for index, entries in done.items():
            sizes = {e["file"]: _size(os.path.join(self.staging, e["file"])) for e in entries}
            if all(sizes[e["file"]] == e.get("bytes") for e in entries):
                keep[index] = entries
        wanted = {e["file"] for entries in keep.values() for e in entries} | {RUN_RECORD}
        for entry in os.listdir(self.staging):
            if entry not in wanted:
                commit.remove_path(os.path.join(self.staging, entry))
        self._rewrite_done(keep)
        return keep

    def _rewrite_done(self, done: dict) -> None:
        lines = "".join(json.dumps({"partition": k, "files": v}) + "\n" for k, v in sorted(done.items()))
        commit.write_bytes(os.path.join(self.staging, DONE_LOG), lines.encode())

    def record_done(self, index: int, entries: list[dict]) -> None:
        """Note partition ``index`` as finished with its files (a resumed run will not compute it again)."""
        self.done[int(index)] = entries
        with open(os.path.join(self.staging, DONE_LOG), "a") as f:
            f.write(json.dumps({"partition": int(index), "files": entries}) + "\n")

    def close_finished(self) -> dict:
        """End a run that found its join already committed: the lock given back; returns the manifest."""
        self.abort()
        return self.finished

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._open:
            # interrupted (Ctrl-C, SIGTERM, exit): the staging directory is kept for a resumed run
            interrupted = exc_type is not None and not issubclass(exc_type, Exception)
            keep = interrupted and self.record is not None
            if keep and exc is not None:  # what the CLI's one line tells
                exc.resumable = (len(self.done), int(self.record.get("partitions", 0)))
            self.abort(keep=keep)

    def abort(self, keep: bool = False) -> None:
        """Forget this run's output: its staging directory goes (unless ``keep``), the old output stays.

        The staging directory is renamed first, so a task still running somewhere can no
        longer add files to it while it is removed.
        """
        self._open = False
        try:
            if keep:
                # under a new name: tasks still running somewhere (cancelled ones finish on their own) can
                # no longer add files to it, or remove files a resumed run has adopted
                with contextlib.suppress(FileNotFoundError):
                    os.rename(self.staging, commit.temp_path(self.path, f"{STAGING_TAG}{uuid.uuid4().hex[:12]}"))
                return
            dead = commit.temp_path(self.path, f"dead-{self.run_id}")
            try:
                os.rename(self.staging, dead)
            except FileNotFoundError:
                dead = self.staging
            commit.remove_path(dead)
        finally:
            self._lock.release()

    def commit(self, entries: list[dict], extra: dict | None = None) -> dict:
        """Check the staging directory against ``entries``, write ``_SUCCESS``, publish; return the manifest."""
        entries = sorted(entries, key=lambda e: e["file"])
        self._verify(entries)
        manifest = {"run": self.run_id, "files": [{"file": e["file"], "rows": e["rows"]} for e in entries],
                    "rows": int(sum(e["rows"] for e in entries)),
                    "bytes": int(sum(e.get("bytes") or 0 for e in entries)), **(extra or {})}
        if self.record is not None:
            manifest["record"] = self.record
        commit.write_bytes(os.path.join(self.staging, SUCCESS),
                           json.dumps(manifest, indent=1, sort_keys=True).encode())
        for name in (RUN_RECORD, DONE_LOG):  # a run's own notes are not published (removed last: resumable until now)
            commit.remove_path(os.path.join(self.staging, name))
        try:
            old = commit.publish_dir(self.staging, self.path, replace=self.overwrite)
        except FileExistsError:
            raise InputError(f"output path {self.path!r} appeared while this run wrote it (not by daskjoin, "
                             "which would have held its lock); nothing was committed") from None
        self._open = False  # committed: an interrupt from here on loses nothing
        try:
            if old is not None:
                commit.remove_path(old)
        finally:
            self._lock.release()
        return manifest

    def _verify(self, entries: list[dict]) -> None:
        """Exactly the reported parts, each the size its task reported; leftovers of killed tasks removed.

        Each reported part is looked up by name (with a few retries: on a network file system a
        file another host wrote may show up late), the listing serves only to find extra files.
        """
        expected = {e["file"]: e.get("bytes") for e in entries}
        if len(expected) != len(entries):
            raise RuntimeError(f"two tasks reported the same part file for {self.path!r}; nothing was committed")
        sizes = _sizes_when_there(self.staging, list(expected))
        missing = [name for name in expected if name not in sizes]
        for name, size in sizes.items():
            if expected[name] is not None and size != expected[name]:
                raise RuntimeError(f"part file {name} of {self.path!r} has {size} bytes, its task wrote "
                                   f"{expected[name]}; nothing was committed")
        if missing:
            raise RuntimeError(f"part files {sorted(missing)[:5]} of {self.path!r} are missing; nothing was committed")
        for name in os.listdir(self.staging):
            if name in (RUN_RECORD, DONE_LOG):
                continue
            if commit.TEMP_MARK in name:
                commit.remove_path(os.path.join(self.staging, name))  # a task killed mid-write (its retry wrote the part)
            elif name not in expected:
                raise RuntimeError(f"unexpected file {name} in the output of this run ({self.path!r}); "
                                   "nothing was committed")


def _sizes_when_there(folder: str, names: list[str], tries: int = 6) -> dict:
    """name -> size of the files present; the missing ones looked for again together (0.05 s, 0.1 s, ...
    apart), since on a network file system a file another host wrote can show up late."""
    sizes, wanted = {}, list(names)
    for attempt in range(tries):
        left = []
        for name in wanted:
            try:
                sizes[name] = os.stat(os.path.join(folder, name)).st_size
            except FileNotFoundError:
                left.append(name)
        wanted = left
        if not wanted or attempt + 1 == tries:
            break
        time.sleep(0.05 * 2 ** attempt)
    return sizes


def _holder(exc: commit.LockBusy) -> str:
    try:
        info = json.loads(exc.holder) if exc.holder else {}
    except ValueError:
        info = {}
    if not info:
        return "its lock file is held"
    return f"run {info.get('run')}, pid {info.get('pid')} on {info.get('host')}, started {info.get('started')}"


def _read_json(path: str):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _size(path: str) -> int | None:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return None


def _refuse_if_different(found: dict | None, wanted: dict, path: str, what: str) -> None:
    """An :class:`InputError` naming each field of the records that differs (None: no record to compare)."""
    if found == wanted:
        return
    if found is None:
        raise InputError(f"cannot resume {path!r}: {what} there recorded no description of its join (written by "
                         "an older daskjoin); pass overwrite=True (--overwrite) to replace it")
    keys = sorted(set(found) | set(wanted))
    diff = "; ".join(f"{k}: {_short(found.get(k))} there, {_short(wanted.get(k))} now"
                     for k in keys if found.get(k) != wanted.get(k))
    raise InputError(f"cannot resume {path!r}: this join differs from {what} ({diff}); run it as it was, or "
                     "pass overwrite=True (--overwrite) to start afresh")


def _short(value) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."


def read_manifest(path: str) -> dict:
    with open(os.path.join(path, SUCCESS)) as f:
        return json.load(f)
