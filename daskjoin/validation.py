"""Input checks, run before any work starts, and the messages they give.

Every message says what was received, what is allowed and how to fix it.
"""
from __future__ import annotations

import math
import os
from numbers import Real

import numpy as np


class InputError(ValueError):
    """Bad input, detected before any work started (the CLI exits with code 2)."""


def check_eps(eps) -> float:
    """Return ``eps`` as a float, or raise if it is not a positive finite number."""
    if isinstance(eps, bool) or not isinstance(eps, (Real, np.floating, np.integer)):
        raise InputError(
            f"eps must be a positive finite number, got {eps!r} of type {type(eps).__name__}; "
            "pass a float such as eps=0.01"
        )
    value = float(eps)
    if not math.isfinite(value) or value <= 0:
        raise InputError(
            f"eps must be a positive finite number, got {eps!r}; pass a float > 0 such as eps=0.01"
        )
    return value


def check_choice(value, allowed, name: str, fix: str = ""):
    """``value`` if it is one of ``allowed`` (strings); ``fix`` ends the message (e.g. "; omit it for ...")."""
    if not isinstance(value, str) or value not in allowed:
        raise InputError(f"{name} must be one of {tuple(allowed)}, got {value!r}{fix}")
    return value


def check_budget(memory_budget, name: str = "memory_budget"):
    """A task's memory budget in bytes, or "auto" (resolved against the cluster's workers once a client is known).

    None means the configured ``daskjoin.memory-budget``; ``name`` is how the message spells the option.
    """
    from . import config

    raw = config.get("memory-budget") if memory_budget is None else memory_budget
    if isinstance(raw, str) and raw == "auto":
        return raw
    try:
        if isinstance(raw, bool):
            raise TypeError("a bool is not a size")
        value = config.parse_bytes(raw)
    except (ValueError, TypeError) as exc:
        raise InputError(f"{name} must be a size such as '2GB' or a number of bytes, or 'auto', got {raw!r}") from exc
    if value <= 0:
        raise InputError(f"{name} must be positive, got {raw!r}; pass a size such as '2GB', or 'auto'")
    return value


def check_dtype(dtype, name: str) -> np.dtype:
    """Accept real numeric dtypes (bool, complex and objects are refused)."""
    dtype = np.dtype(dtype)
    if dtype.kind not in "iuf":
        raise InputError(
            f"{name} must hold real numbers (float32/float64, or integers that are converted), "
            f"got dtype {dtype}; convert it first, e.g. with `daskjoin import` or arr.astype('float32')"
        )
    return dtype


def check_shape(shape, name: str) -> tuple[int, int]:
    """Accept 2-D shapes (rows are points, columns are dimensions, at least one column)."""
    if len(shape) != 2:
        raise InputError(
            f"{name} must be a 2-D array (rows are points, columns are dimensions), "
            f"got shape {tuple(shape)}; reshape it, e.g. x.reshape(-1, 1) for 1-D data"
        )
    if shape[1] < 1:
        raise InputError(f"{name} must have at least one column (dimension), got shape {tuple(shape)}")
    return int(shape[0]), int(shape[1])


def check_same_dims(d_a: int, d_b: int) -> None:
    if d_a != d_b:
        raise InputError(
            f"A and B must have the same dimensionality, got A with {d_a} columns and B with {d_b}; "
            "join arrays whose rows live in the same space"
        )


def first_nonfinite_row(block: np.ndarray) -> int:
    """Index of the first row of ``block`` holding NaN or inf, or -1 if all are finite."""
    if block.dtype.kind != "f" or block.size == 0:
        return -1
    bad = ~np.isfinite(block).all(axis=1)
    hits = np.flatnonzero(bad)
    return int(hits[0]) if hits.size else -1


def raise_nonfinite(name: str, row: int) -> None:
    raise InputError(
        f"{name} holds NaN or inf values, first in row {row}; only finite coordinates are allowed: "
        "drop or impute those rows before joining"
    )


def check_output_path(path, overwrite: bool, resume: bool = False) -> str:
    """Refuse an existing output path unless ``overwrite`` is set (or ``resume``, where it holds a finished
    daskjoin output: the run checks that it is this join's)."""
    path = os.path.abspath(os.fspath(path))  # workers may run in another directory
    finished = resume and os.path.isfile(os.path.join(path, "_SUCCESS"))  # io.parquet_out.SUCCESS
    if os.path.exists(path) and not overwrite and not finished:
        raise InputError(
            f"output path {path!r} already exists; choose another path or pass overwrite=True "
            "(--overwrite on the command line)"
        )
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise InputError(f"the directory of output path {path!r} does not exist; create {parent!r} first")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"cannot write output path {path!r}: the directory {parent!r} is not writable "
                         "(permission denied); choose a directory you can write to")
    return path


def _within(inner: str, outer: str) -> bool:
    return inner == outer or inner.startswith(outer.rstrip(os.sep) + os.sep)


def check_output_apart(out, protected: dict) -> None:
    """Refuse an output path equal to, inside, or containing any protected path (inputs and their caches).

    ``protected`` maps a description (``"input A"``) to a path.  Paths are compared after
    resolving symbolic links, whatever ``overwrite`` says: a join never writes into, or
    replaces, what it reads.
    """
    target = os.path.realpath(os.fspath(out))
    for what, path in protected.items():
        if path is None:
            continue
        other = os.path.realpath(os.fspath(path))
        if _within(target, other) or _within(other, target):
            relation = "is" if target == other else ("lies inside" if _within(target, other) else "contains")
            raise InputError(
                f"output path {os.fspath(out)!r} {relation} {what} ({other!r}); a join never writes into or "
                "replaces what it reads: choose an output path outside it"
            )


class DamagedStoreError(InputError):
    """A Zarr store whose chunk is missing or unreadable (truncated, wrong size, undecodable).

    ``store`` is the store's path and ``key`` the chunk's key inside it (e.g. ``c/5/0``),
    where known.  An :class:`InputError`: the CLI exits with code 2.
    """

    def __init__(self, message: str, store: str | None = None, key: str | None = None):
        super().__init__(message)
        self.store = store
        self.key = key

    def __reduce__(self):  # raised on workers: keep store and key through pickling
        return (type(self), (str(self), self.store, self.key))


EXACT_INT_LIMIT = 2**53  # every integer of magnitude <= 2**53 is a float64


def check_exact_integers(block, name: str, first_row: int = 0) -> None:
    """Refuse int64/uint64 values of magnitude above 2**53: float64, which joins compute in, would round them.

    Smaller integer types are always exact and pass without a look.  ``first_row`` is the
    row of ``block[0]`` in the whole input (for the message).
    """
    block = np.asarray(block)
    if block.dtype not in (np.int64, np.uint64) or block.size == 0:
        return
    limit = EXACT_INT_LIMIT
    hi = int(block.max())
    lo = int(block.min()) if block.dtype == np.int64 else 0
    if hi <= limit and lo >= -limit:
        return
    flat = block.reshape(block.shape[0], -1) if block.ndim > 1 else block.reshape(-1, 1)
    bad = flat > limit
    if block.dtype == np.int64:
        bad |= flat < -limit
    row = int(np.flatnonzero(bad.any(axis=1))[0])
    value = int(flat[row][bad[row]][0])
    raise InputError(
        f"{name} holds the {block.dtype} value {value} in row {first_row + row}, beyond ±2**53 "
        f"(= {limit}): joins compute in float64, which cannot hold it exactly, so distances and pairs "
        "would silently change; convert the input explicitly, accepting the rounding (e.g. "
        "x.astype(np.float64)), or shift/rescale the values into ±2**53 first"
    )
