"""The join options: one declarative table of constraints, checked the same way by the API and the CLI.

Each :class:`Option` of :data:`OPTIONS` names an option, the join kinds that take it, its
checker (allowed values per kind, or a function) and its command-line flag;
:data:`RULES` holds the rules across options.  :func:`check_options` checks the options a
call was given, before any input is opened or any cluster is reached, and returns them
normalised; a bad value raises :class:`~daskjoin.validation.InputError` saying what was
received, what is allowed and how to fix it, with the option spelled as the caller knows it
(``backend`` from Python, ``--backend`` from the CLI: ``spelled="cli"``).

A new join kind adds its name to :data:`KINDS`, its own options (``k`` for a kNN-join, say) as
entries with ``kinds=("knn",)``, and its kind to the ``kinds`` and per-kind values of the shared
entries it takes (``method``, ``gpu_options``).
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .kernels import METHODS
from .kernels.grid_geometry import PATTERNS as GRID_PATTERNS
from .kernels.sets.verify_gpu import KERNELS as SET_VERIFY_KERNELS
from .planning.planner import PARTITIONINGS
from .planning.set_threshold import MEASURES, parse_threshold
from .planning.sets import ALGORITHMS
from .validation import InputError, check_budget, check_choice, check_eps

#: join kind -> how the API and the CLI name its join (for messages)
KINDS = {"epsilon": {"api": "similarity_join", "cli": "join"},
         "sets": {"api": "set_similarity_join", "cli": "setjoin"},
         "knn": {"api": "knn_join", "cli": "knn"}}
SPELLINGS = ("api", "cli")

BACKENDS = ("auto", "cpu", "gpu")
OUTPUTS = ("pairs", "count")
#: the kNN-join's methods (its drivers: ``kernels/registry.py``, kind "knn")
KNN_METHODS = ("grid", "brute", "szl")
#: kind -> method -> the ``gpu_options`` keys its GPU driver takes -> a checker of the value (None: any)
GPU_OPTIONS = {
    "epsilon": {  # defaults come from benchmarks/bench_gpu.py
        "grid": {"threads_per_point": lambda v, label: _int_in(v, label, 1, 32),
                 "sort_by_workload": lambda v, label: _flag(v, label),
                 "work_queue": lambda v, label: _flag(v, label),
                 "max_dims": lambda v, label: _int_in(v, label, 0, 64),
                 "pattern": tuple(GRID_PATTERNS)},
        "brute": {"tile": lambda v, label: _int_in(v, label, 1, 1 << 16),
                  "batch_bytes": lambda v, label: _int_in(v, label, 1, 1 << 62),
                  "filter": ("auto", "fp32", "int8", "fp16")},
        # the method's own options, taken by its CPU driver too (METHOD_OPTIONS)
        "szl": {"shifts": ("uniform", "uniform-logd", "random"), "lists": lambda v, label: _int_in(v, label, 1, 8)},
        "nlj": {},
        "directory": {"levels": lambda v, label: _int_in(v, label, 1, 8),
                      "fanout": lambda v, label: _int_in(v, label, 2, 63), "pca": lambda v, label: _flag(v, label)},
    },
    # the kNN brute driver's filter (kernels/knn_gpu.KnnBruteGpu); grid and szl take none
    "knn": {"grid": {}, "brute": {"filter": ("auto", "fp32", "int8", "fp16")}, "szl": {}},
    "sets": {method: {"verify": tuple(sorted(SET_VERIFY_KERNELS)),
                      "block": lambda v, label: _int_in(v, label, 32, 1024),
                      "chunk_candidates": lambda v, label: _int_in(v, label, 1, 1 << 62)}
             for method in ALGORITHMS},
}
def _int_in(value, label: str, lo: int, hi: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or not lo <= value <= hi:
        raise InputError(f"{label} must be an integer from {lo} to {hi}, got {value!r}")
    return int(value)


def _flag(value, label: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise InputError(f"{label} must be True or False, got {value!r}")
    return bool(value)


#: kind -> method -> the keys of ``gpu_options`` that are the method's own, passed to its CPU driver as well
METHOD_OPTIONS = {"epsilon": {"grid": ("pattern",), "szl": ("shifts", "lists"),
                              "directory": ("levels", "fanout", "pca")}}
_GPU_EXAMPLE = {"epsilon": "{'threads_per_point': 4}", "sets": "{'verify': 'thread'}", "knn": "{'filter': 'int8'}"}


# --------------------------------------------------------------------------- checkers
# A checker is ``check(value, label, kind, values) -> normalised value``: ``label`` is the option as
# the caller spells it, ``values`` the options already checked (normalised), in table order.


def _per_kind(table, kind):
    return table.get(kind) if isinstance(table, dict) else table


def one_of(allowed, default=None) -> Callable:
    """One of ``allowed`` (a tuple, or {kind: tuple}); ``None`` means ``default`` where the kind has one."""
    def check(value, label, kind, values):
        choices, fallback = _per_kind(allowed, kind), _per_kind(default, kind)
        if value is None and fallback is not None:
            return fallback
        hint = f"; omit {label} for the default {fallback!r}" if fallback is not None else ""
        return check_choice(value, choices, label, hint)
    check.allowed = allowed
    return check


def boolean(value, label, kind, values) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise InputError(f"{label} must be True or False, got {value!r} of type {type(value).__name__}")


def positive_int_or_none(value, label, kind, values):
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 1:
        raise InputError(f"{label} must be a positive integer, got {value!r}; or omit {label} to choose automatically")
    return int(value)


def neighbours(value, label, kind, values) -> int:
    """``k`` of a kNN-join: a positive integer (its upper bound, the candidate count, is checked with the inputs)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 1:
        raise InputError(f"{label} must be a positive integer (the number of neighbours per row), got {value!r}"
                         + (f" of type {type(value).__name__}" if not isinstance(value, (int, np.integer)) else ""))
    return int(value)


def path_or_none(value, label, kind, values):
    if value is None:
        return None
    if isinstance(value, (str, os.PathLike)) and os.fspath(value) not in ("", b""):
        return value
    raise InputError(f"{label} must be the path of the output directory (a str or os.PathLike), or None to return "
                     f"the pairs, got {value!r} of type {type(value).__name__}")


def budget(value, label, kind, values):
    return check_budget(value, label)


def eps(value, label, kind, values) -> float:
    return check_eps(value)


def threshold(value, label, kind, values):
    """A :class:`~daskjoin.planning.set_threshold.Threshold` of ``values["measure"]`` (checked first)."""
    return parse_threshold(values.get("measure", "jaccard"), value)


def client(value, label, kind, values):
    if value is None or isinstance(value, str) or callable(getattr(value, "submit", None)):
        return value
    raise InputError(f"{label} must be a distributed.Client, a scheduler address such as 'tcp://10.0.0.5:8786', "
                     f"or None (the current client, else a local cluster), got {value!r} of type {type(value).__name__}")


def gpu_options(value, label, kind, values) -> dict:
    """The ``gpu_options`` dict, its keys those of ``values["method"]`` ("auto": of any method of the kind)."""
    return check_gpu_options(kind, values.get("method", "auto"), value, label)


def check_gpu_options(kind: str, method: str, options, label: str = "gpu_options") -> dict:
    """``options`` (a dict or None) checked against ``method``'s GPU driver of join ``kind``; a new dict."""
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise InputError(f"{label} must be a dict such as {_GPU_EXAMPLE[kind]}, got {options!r}")
    per_method = GPU_OPTIONS[kind]
    if method in per_method:
        allowed = per_method[method]
    else:  # "auto": the method is chosen when planning, and checked again then
        allowed = {k: c for table in per_method.values() for k, c in table.items()}
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise InputError(f"{label} {unknown} are not options of method {method!r}; allowed: {sorted(allowed)}")
    for key, choices in allowed.items():
        if key in options and callable(choices):
            choices(options[key], f"{label} {key}")
        elif key in options and choices is not None:
            check_choice(options[key], choices, f"{label} {key}")
    if method == "directory" and options.get("levels", 3) * options.get("fanout", 16) >= 64:
        raise InputError(f"{label} levels x fanout must stay below 64 (the GPU walk's stack), got "
                         f"{options.get('levels', 3)} x {options.get('fanout', 16)}")
    return dict(options)


# --------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class Option:
    """One option: its checker, the join kinds that take it, its CLI flag, deprecated aliases per kind."""

    name: str
    check: Callable
    kinds: tuple = tuple(KINDS)
    flag: str | None = None  # None: the command line has no such flag
    help: str = ""
    aliases: tuple = ()  # ((kind, old name), ...): deprecated names of the same option, warned about

    def label(self, spelled: str) -> str:
        return self.flag if spelled == "cli" and self.flag else self.name


OPTIONS = (
    # each kind's own
    Option("eps", eps, ("epsilon",), "--eps", "join radius: a positive finite number"),
    Option("partitioning", one_of(PARTITIONINGS, "auto"), ("epsilon",), "--partitioning",
           "how the inputs are cut into tasks"),
    Option("with_distance", boolean, ("epsilon",), "--no-distance", "include the dist column"),
    Option("measure", one_of(MEASURES, "jaccard"), ("sets",), "--measure", "the similarity measure"),
    Option("threshold", threshold, ("sets",), "--threshold", "in (0, 1]; for overlap a number of shared tokens"),
    Option("partitions", positive_int_or_none, ("sets",), "--partitions", "size-range partitions (None: automatic)"),
    Option("k", neighbours, ("knn",), "--k", "neighbours per row: a positive integer"),
    # shared
    Option("method", one_of({"epsilon": ("auto",) + METHODS, "sets": ALGORITHMS, "knn": ("auto",) + KNN_METHODS},
                            {"epsilon": "auto", "sets": "ppjoin", "knn": "auto"}),
           flag="--method", help="the join algorithm (per kind)", aliases=(("sets", "algorithm"),)),
    Option("backend", one_of(BACKENDS, "auto"), flag="--backend", help="where tasks run"),
    # the kNN-join has no count (it is n * k rows): knn_join checks its output=... with KNN_OUTPUT
    Option("output", one_of(OUTPUTS, "pairs"), ("epsilon", "sets"), flag="--count",
           help="pairs, or only their exact count"),
    Option("out", path_or_none, flag="--out", help="write Parquet here"),
    Option("overwrite", boolean, flag="--overwrite", help="replace an existing out"),
    Option("resume", boolean, flag="--resume",
           help="continue an interrupted run to out (a finished one: nothing to do)"),
    Option("progress", boolean, flag="--quiet", help="show a progress bar"),
    Option("memory_budget", budget, flag="--memory-budget", help="memory one task may use"),
    Option("gpu_options", gpu_options, ("epsilon", "sets", "knn"), flag="--option",
           help="the method's own options and tuning of the GPU driver (keys per kind and method)"),
    Option("client", client, flag="--scheduler", help="the Dask client, a scheduler address, or None"),
)
BY_NAME = {option.name: option for option in OPTIONS}
KNN_OUTPUT = one_of(("pairs",), "pairs")


@dataclass(frozen=True)
class Rule:
    """A rule across options: ``broken(values)`` refuses; ``message`` per spelling (none: not checked there)."""

    names: tuple
    broken: Callable
    message: dict


RULES = (
    Rule(("output", "out"), lambda v: v["output"] == "count" and v["out"] is not None,
         {"api": "output='count' returns a number; it cannot be combined with out=PATH",
          "cli": "--count prints a number and writes nothing: drop --out, or drop --count"}),
    # the command line has no lazy frame to return: pairs go to --out
    Rule(("output", "out"), lambda v: v["output"] == "pairs" and v["out"] is None,
         {"cli": "{command} needs --out PATH for the Parquet output, or --count to print the number of pairs"}),
    # overwrite without out is fine (nothing to replace)
    Rule(("resume", "out"), lambda v: v["resume"] and v["out"] is None,
         {"api": "resume=True continues an interrupted run that wrote Parquet: pass the same out=PATH",
          "cli": "--resume continues an interrupted run that wrote Parquet: pass the same --out PATH"}),
)


def check_options(kind: str, *, spelled: str = "api", stacklevel: int = 1, **values) -> dict:
    """Check the options given for a join of ``kind``; returns them normalised (aliases folded in).

    Only the options given are checked (the rules: where all their options are given).
    ``spelled``: "api" or "cli", how messages name the options.  ``stacklevel``: of a
    deprecation warning, counted from the caller.  Raises :class:`InputError`.
    """
    if kind not in KINDS or spelled not in SPELLINGS:
        raise ValueError(f"unknown join kind {kind!r} or spelling {spelled!r}")
    aliases = {old: option for option in OPTIONS for alias_kind, old in option.aliases if alias_kind == kind}
    for name in values:
        if name not in aliases and (name not in BY_NAME or kind not in BY_NAME[name].kinds):
            raise TypeError(f"{KINDS[kind]['api']}() has no option {name!r}")
    for old, option in aliases.items():
        old_value = values.pop(old, None)
        if old_value is None:
            continue
        warnings.warn(f"{old}=... is deprecated; use {option.name}=... (the same values)", DeprecationWarning,
                      stacklevel=stacklevel + 1)
        new_value = values.get(option.name)
        if new_value is not None and new_value != old_value:
            raise InputError(f"{option.name}={new_value!r} and {old}={old_value!r} disagree; pass {option.name} only")
        values[option.name] = old_value
    checked = {}
    for option in OPTIONS:
        if option.name in values:
            checked[option.name] = option.check(values[option.name], option.label(spelled), kind, checked)
    for rule in RULES:
        message = rule.message.get(spelled)
        if message and all(name in checked for name in rule.names) and rule.broken(checked):
            raise InputError(message.format(command=KINDS[kind][spelled]))
    return checked


def resolve(client_value):
    """The client a join runs on: the one given, one of a scheduler address, or the default (see ``resolve_client``)."""
    from .execution.cluster import resolve_client

    if isinstance(client_value, str):
        return resolve_client(address=client_value)
    return resolve_client(client_value)
