"""Load: 20 joins submitted at once from 4 client threads to one cluster, each with its own result.

ε-joins (counts, lazy frames, Parquet; Zarr and in-memory inputs, self and A×B, several eps),
set joins and kNN-joins share the session's multi-process cluster; every result is checked
against its oracle.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import daskjoin as dj
from joinhelpers import write_zarr

pytestmark = pytest.mark.integration


def _pairs_of(x, y, eps) -> set:
    """Oracle: every (i, j) with float64 squared distance summed in dimension order <= eps * eps."""
    d2 = np.zeros((len(x), len(y)))
    for k in range(x.shape[1]):
        diff = x[:, k][:, None] - y[:, k][None, :]
        d2 = d2 + diff * diff
    i, j = np.nonzero(d2 <= np.float64(eps) * np.float64(eps))
    if y is x:
        keep = i < j
        i, j = i[keep], j[keep]
    return set(zip(i.tolist(), j.tolist()))


def _knn_oracle(x, k) -> set:
    d2 = np.zeros((len(x), len(x)))
    for c in range(x.shape[1]):
        diff = x[:, c][:, None] - x[:, c][None, :]
        d2 = d2 + diff * diff
    np.fill_diagonal(d2, np.inf)
    rows = set()
    for i in range(len(x)):
        order = np.lexsort((np.arange(len(x)), d2[i]))[:k]  # by distance, ties by the smaller j
        rows |= {(i, int(j)) for j in order}
    return rows


def _read(path) -> set:
    names = sorted(n for n in os.listdir(path) if n.startswith("part-"))
    frame = pd.concat([pq.read_table(os.path.join(path, n)).to_pandas() for n in names], ignore_index=True)
    assert not frame.duplicated(["i", "j"]).any()
    return set(zip(frame["i"].tolist(), frame["j"].tolist()))


def test_twenty_joins_from_four_threads(client, tmp_path):
    rng = np.random.default_rng(41)
    xs = [rng.random((1500 + 100 * k, 2 + k % 3)) for k in range(4)]
    stores = [write_zarr(tmp_path / f"x{k}.zarr", x, 300) for k, x in enumerate(xs)]
    records = [sorted(set(rng.integers(0, 60, rng.integers(2, 12)).tolist())) for _ in range(400)]
    jobs = []
    for n in range(20):
        k = n % 4
        x, store, eps = xs[k], stores[k], 0.03 + 0.01 * (n % 5)
        source = store if n % 2 else x
        out = tmp_path / f"out{n}.parquet"
        kind = n % 5
        if kind == 0:
            jobs.append((lambda s=source, e=eps: dj.similarity_join(s, eps=e, output="count", client=client,
                                                                     memory_budget="256KiB"),
                         lambda got, x=x, e=eps: got == len(_pairs_of(x, x, e))))
        elif kind == 1:
            jobs.append((lambda s=source, e=eps: dj.similarity_join(s, eps=e, client=client,
                                                                     memory_budget="256KiB").compute(),
                         lambda got, x=x, e=eps: set(zip(got["i"].tolist(), got["j"].tolist())) == _pairs_of(x, x, e)))
        elif kind == 2:
            y = xs[k][:700]
            jobs.append((lambda s=source, y=y, e=eps, o=out: dj.similarity_join(s, y, eps=e, out=o, client=client,
                                                                                 memory_budget="256KiB"),
                         lambda got, x=x, y=y, e=eps, o=out: _read(o) == _pairs_of(x, y, e)))
        elif kind == 3:
            jobs.append((lambda o=out: dj.set_similarity_join(records, threshold=0.4, client=client, out=o),
                         lambda got, o=out: _read(o) == _set_oracle(records, 0.4)))
        else:
            jobs.append((lambda s=source, o=out: dj.knn_join(s, k=4, client=client, out=o, memory_budget="256KiB"),
                         lambda got, x=x, o=out: _read(o) == _knn_oracle(x, 4)))
    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(run) for run, _ in jobs]
        results = [f.result(timeout=600) for f in futures]
    failed = [n for n, ((_, check), got) in enumerate(zip(jobs, results)) if not check(got)]
    assert failed == [], f"joins {failed} gave wrong results under load"


def _set_oracle(records, threshold) -> set:
    from set_oracle import oracle_join_fast

    return set(oracle_join_fast(records, threshold=threshold))


def test_gpu_tasks_on_a_mixed_cluster_need_the_gpu_resource(client, monkeypatch):
    """Placement of backend='gpu' tasks: by the GPU resource; nothing where every worker has a GPU; a mixed
    cluster whose workers declare nothing is refused (tasks pinned to addresses would wait forever for a
    GPU worker that came back on another port)."""
    from types import SimpleNamespace

    from daskjoin.execution import resources
    from daskjoin.validation import InputError

    job = SimpleNamespace(backend="gpu")
    addresses = sorted(resources.worker_info(client))
    monkeypatch.setattr(resources, "gpu_seen", lambda c, w=None: {a: True for a in addresses})
    assert resources.gpu_placement(client, job) == {}
    monkeypatch.setattr(resources, "gpu_seen", lambda c, w=None: {a: k == 0 for k, a in enumerate(addresses)})
    with pytest.raises(InputError, match="declare the resource GPU=1"):
        resources.gpu_placement(client, job)
    declared = {a: {"resources": {"GPU": 1} if k == 0 else {}} for k, a in enumerate(addresses)}
    monkeypatch.setattr(resources, "worker_info", lambda c: declared)
    assert resources.gpu_placement(client, job) == {"resources": {"GPU": 1}}
    assert resources.gpu_placement(client, SimpleNamespace(backend="auto")) == {}
