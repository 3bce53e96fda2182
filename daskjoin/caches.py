"""What daskjoin keeps in this process between joins: one LRU, one lock, one place to look.

A repeated join of unchanged inputs skips its fixed costs (opening stores, statistics,
fingerprints, plans, graphs) because their results are kept here.  Every entry lives in
one :class:`ProcessCache` under a *namespace* (what kind of thing it is) with a cap per
namespace, so that many entries of one kind (say, opened stores) never evict the others
(say, plans).  ``CACHE.info()`` says what is kept; :func:`clear_cache` forgets it.

Entries are never stale by construction: each key holds what identifies the current
contents (metadata tokens, ``stat`` of chunk files, fingerprints), so this cache only
ever saves work, and clearing it only ever costs work.  Standard library only: every
layer (io, planning, execution, api) may import it.
"""
from __future__ import annotations

import threading
from collections import OrderedDict

#: Entries kept per namespace (least recently used evicted first), as the module caches they replace kept.
CAPS = {
    "plans": 64,            # planning.planner: (input tokens, eps, options, ...) -> Plan
    "estimates": 64,        # planning.planner: (fingerprints, sizes, eps, sample rows) -> Estimate
    "stats": 32,            # planning.bounds: statistics file -> BlockStats
    "fingerprints": 256,    # planning.cache: state token -> fingerprint
    "opened": 256,          # io.zarr_in: (absolute path, metadata token, missing-chunks mode) -> ZarrSource
    "zarr-arrays": 64,      # io.zarr_in: (store path, array path, token) -> open zarr array
    "set-stores": 32,       # io.sets_store: (path, stamp) -> (meta, arrays)
    "set-work": 64,         # api_sets: (store, its state, threshold, first matchable set) -> filtering work bound
    "frames": 16,           # execution.graph: cache key -> (owner, Dask DataFrame)
    "flock": 64,            # io.commit: device id -> whether flock works on that file system
    "gpu-seen": 64,         # api: (client id, worker addresses) -> {worker: sees a GPU}
    "gpu-memory": 64,       # api: (client id, worker addresses) -> {worker: its GPU's bytes}
    "plan-options": 16,     # api: (id(plan), gpu options) -> (plan, plan with those options)
}
#: Cap of a namespace not named in :data:`CAPS`.
DEFAULT_CAP = 64

_MISSING = object()


class ProcessCache:
    """One LRU of ``(namespace, key) -> value`` with a cap per namespace, safe to share between threads.

    Values are built outside the lock (:meth:`get_or_build`): two threads missing the same key
    may both build it, the last one kept; nothing slow ever runs while others wait on the lock.
    """

    def __init__(self, caps: dict | None = None, default_cap: int = DEFAULT_CAP):
        self._entries: OrderedDict = OrderedDict()  # (namespace, key) -> value, least recently used first
        self._counts: dict = {}  # namespace -> entries it holds
        self._caps = dict(CAPS if caps is None else caps)
        self._default_cap = default_cap
        self._lock = threading.RLock()

    def cap(self, namespace: str) -> int:
        """How many entries ``namespace`` keeps."""
        return self._caps.get(namespace, self._default_cap)

    def set_cap(self, namespace: str, cap: int) -> None:
        """Keep at most ``cap`` entries of ``namespace`` (evicting its least recently used now if over)."""
        if cap < 1:
            raise ValueError(f"cap must be at least 1, got {cap!r}")
        with self._lock:
            self._caps[namespace] = int(cap)
            self._evict(namespace)

    def get(self, namespace: str, key, default=None):
        """The value kept for ``key`` (now the most recently used), or ``default``."""
        entry = (namespace, key)
        with self._lock:
            value = self._entries.get(entry, _MISSING)
            if value is _MISSING:
                return default
            self._entries.move_to_end(entry)
            return value

    def put(self, namespace: str, key, value):
        """Keep ``value`` for ``key`` (evicting the namespace's least recently used beyond its cap); returns it."""
        entry = (namespace, key)
        with self._lock:
            if entry in self._entries:
                self._entries.move_to_end(entry)
            else:
                self._counts[namespace] = self._counts.get(namespace, 0) + 1
            self._entries[entry] = value
            self._evict(namespace)
        return value

    def get_or_build(self, namespace: str, key, build):
        """The value kept for ``key``, else ``build()`` (called without the lock held), kept and returned."""
        value = self.get(namespace, key, _MISSING)
        if value is _MISSING:
            value = self.put(namespace, key, build())
        return value

    def pop(self, namespace: str, key, default=None):
        """Forget ``key``; returns what was kept for it, or ``default``."""
        entry = (namespace, key)
        with self._lock:
            value = self._entries.pop(entry, _MISSING)
            if value is _MISSING:
                return default
            self._counts[namespace] -= 1
            return value

    def clear(self, namespace: str | None = None) -> None:
        """Forget every entry of ``namespace``, or every entry of all namespaces."""
        with self._lock:
            if namespace is None:
                self._entries.clear()
                self._counts.clear()
            elif self._counts.get(namespace):
                for entry in [e for e in self._entries if e[0] == namespace]:
                    del self._entries[entry]
                self._counts[namespace] = 0

    def info(self) -> dict:
        """Namespace -> number of entries kept (every namespace with a cap or an entry), to see what is kept."""
        with self._lock:
            names = set(self._caps) | set(self._counts)
            return {name: self._counts.get(name, 0) for name in sorted(names)}

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def __repr__(self) -> str:
        kept = ", ".join(f"{name}={count}" for name, count in self.info().items() if count)
        return f"<ProcessCache {len(self)} entries{': ' + kept if kept else ''}>"

    def _evict(self, namespace: str) -> None:
        # under the lock: oldest entries of this namespace first (a scan of at most the sum of the caps)
        excess = self._counts.get(namespace, 0) - self.cap(namespace)
        if excess <= 0:
            return
        victims = []
        for entry in self._entries:
            if entry[0] == namespace:
                victims.append(entry)
                if len(victims) == excess:
                    break
        for entry in victims:
            del self._entries[entry]
        self._counts[namespace] -= len(victims)


#: The cache of this process (each Dask worker process has its own).
CACHE = ProcessCache()


def clear_cache() -> None:
    """Forget everything daskjoin keeps in this process: plans, estimates, loaded statistics,
    fingerprints, opened stores, graphs, probes; and the free blocks of the pool of large arrays
    (:mod:`daskjoin.kernels.array_pool`) go back to the system.

    A repeated join then redoes its fixed costs (it reads the statistics files back, stats
    the chunk files, plans again) but gives the same result.  On-disk caches stay: the
    statistics files and sorted copies beside each input (or under ``daskjoin.cache-dir``)
    are removed only by deleting them.  Worker processes keep their own opened stores; on a
    cluster, ``client.run(daskjoin.clear_cache)`` clears those too.

    >>> import daskjoin
    >>> daskjoin.clear_cache()
    """
    from .kernels.array_pool import release

    CACHE.clear()
    release()
