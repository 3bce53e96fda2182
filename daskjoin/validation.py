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


def check_output_path(path, overwrite: bool) -> str:
    """Refuse an existing output path unless ``overwrite`` is set."""
    path = os.path.abspath(os.fspath(path))  # workers may run in another directory
    if os.path.exists(path) and not overwrite:
        raise InputError(
            f"output path {path!r} already exists; choose another path or pass overwrite=True "
            "(--overwrite on the command line)"
        )
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise InputError(f"the directory of output path {path!r} does not exist; create {parent!r} first")
    return path
