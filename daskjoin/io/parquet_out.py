"""Parquet output with a commit protocol: each run owns its output until it commits.

A run (:class:`OutputRun`) takes the output path's lock (a second writer fails at once,
saying who holds it), writes every partition into its own staging directory (a hidden
sibling named after its run id), and commits by moving that directory into place only
when every part file its tasks reported is there with the reported size and nothing
else is.  ``_SUCCESS`` (JSON: run id, files, row counts, total) is written last inside the
staging directory, so a directory with ``_SUCCESS`` at the output path is always one
run's complete output.  With ``overwrite`` the previous output stays readable until the
new one replaces it (see :func:`daskjoin.io.commit.publish_dir`).  A killed run leaves
only its staging directory, which the next run to the same path removes.

Part files have deterministic names (``part-NNNNN.parquet``) and are written under a
temporary name and renamed, so a retried task rewrites the same file.
"""
from __future__ import annotations

import json
import os
import re
import socket
import time
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..validation import InputError
from . import commit

SUCCESS = "_SUCCESS"
PART_PREFIX = "part-"


DISTANCE = ("dist", "float32")


def schema(value: tuple | None = DISTANCE) -> pa.Schema:
    """Columns i, j (int64) and an optional value column given as (name, numpy dtype name)."""
    fields = [pa.field("i", pa.int64(), nullable=False), pa.field("j", pa.int64(), nullable=False)]
    if value is not None:
        fields.append(pa.field(value[0], pa.from_numpy_dtype(np.dtype(value[1])), nullable=False))
    return pa.schema(fields)


def part_name(index: int) -> str:
    return f"{PART_PREFIX}{index:05d}.parquet"


def write_partition(out_dir: str, index: int, batches, with_distance: bool = True, *,
                    value: tuple | None = DISTANCE) -> dict:
    """Write the (i, j, value) ``batches`` of partition ``index`` as one file, one row group per batch.

    ``value`` names the third column and its dtype (the ε-join's float32 ``dist`` by default);
    ``with_distance=False`` drops it.  Returns the manifest entry: file name, rows and bytes.
    """
    final = os.path.join(out_dir, part_name(index))
    if not with_distance:
        value = None
    sch = schema(value)
    rows = 0
    with commit.atomic_file(final) as tmp:
        with pq.ParquetWriter(tmp, sch, compression="snappy") as writer:
            for i, j, dist in batches:
                cols = [pa.array(np.asarray(i, np.int64)), pa.array(np.asarray(j, np.int64))]
                if value is not None:
                    cols.append(pa.array(np.asarray(dist, value[1])))
                if len(i):
                    writer.write_table(pa.Table.from_arrays(cols, schema=sch), row_group_size=len(i))
                rows += len(i)
        size = os.path.getsize(tmp)
    return {"file": part_name(index), "rows": int(rows), "bytes": int(size)}


PART_RE = re.compile(r"^part-\d{5,}\.parquet$")
TEMP_RE = re.compile(r"^\.(part-\d{5,}\.parquet|_SUCCESS)\.tmp-[0-9a-f]+$")


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

    def __init__(self, path: str, overwrite: bool):
        self.path = os.path.abspath(path)
        self.overwrite = bool(overwrite)
        self.run_id = uuid.uuid4().hex[:12]
        self.staging = commit.temp_path(self.path, f"run-{self.run_id}")
        note = json.dumps({"run": self.run_id, "pid": os.getpid(), "host": socket.gethostname(),
                           "started": time.strftime("%Y-%m-%d %H:%M:%S")})
        self._lock = commit.FileLock(commit.lock_path(self.path), blocking=False, note=note)
        self._open = False

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
            if os.path.lexists(self.path):  # looked at again now that no one else can commit
                if not self.overwrite:
                    raise InputError(f"output path {self.path!r} already exists (another run wrote it meanwhile); "
                                     "choose another path or pass overwrite=True")
                check_replaceable(self.path)
            commit.remove_temps(self.path)  # staging directories of killed runs
            os.mkdir(self.staging)
        except BaseException:
            self._lock.release()
            raise
        self._open = True
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._open:
            self.abort()

    def abort(self) -> None:
        """Forget this run's output: its staging directory goes, the old output stays.

        The staging directory is renamed first, so a task still running somewhere can no
        longer add files to it while it is removed.
        """
        self._open = False
        try:
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
                    "rows": int(sum(e["rows"] for e in entries)), **(extra or {})}
        commit.write_bytes(os.path.join(self.staging, SUCCESS),
                           json.dumps(manifest, indent=1, sort_keys=True).encode())
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


def read_manifest(path: str) -> dict:
    with open(os.path.join(path, SUCCESS)) as f:
        return json.load(f)
