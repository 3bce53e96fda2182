"""TLS through Dask's ``Security``: a scheduler and worker processes that speak only ``tls://``, reached from
the API with a ``Security`` object and from the real CLI with certificate files named in dask config (the
environment), give the oracle's pairs; a client without the certificates is refused."""
from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest
from scipy.spatial import cKDTree

import daskjoin as dj
from clihelpers import _env, _explain, run_cli
from joinhelpers import write_zarr

pytestmark = pytest.mark.integration
pytest.importorskip("cryptography")

EPS = 0.04


@pytest.fixture(scope="module")
def tls_cluster():
    from distributed import LocalCluster
    from distributed.security import Security

    security = Security.temporary()
    cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=True, protocol="tls", security=security,
                           dashboard_address=":0", memory_limit=0)
    try:
        yield cluster, security
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def points(tmp_path_factory):
    x = np.random.default_rng(5).random((6000, 3))
    path = write_zarr(str(tmp_path_factory.mktemp("tls") / "x.zarr"), x, 1000)
    return x, path, len(cKDTree(x).query_pairs(EPS, output_type="ndarray"))


def test_joins_over_tls_from_the_api(tls_cluster, points, tmp_path):
    from distributed import Client

    cluster, security = tls_cluster
    x, path, expected = points
    assert cluster.scheduler_address.startswith("tls://")
    with Client(cluster.scheduler_address, security=security) as client:
        assert dj.similarity_join(path, eps=EPS, client=client, output="count") == expected
        # an in-memory input is scattered to the worker over the encrypted connection
        result = dj.similarity_join(x, eps=EPS, client=client, out=str(tmp_path / "p.parquet"), memory_budget="200KiB")
    assert result.plan.ntasks > 1
    assert result.pairs == expected == pq.read_table(tmp_path / "p.parquet").num_rows


def test_cli_over_tls_with_certificates_in_dask_config(tls_cluster, points, tmp_path):
    cluster, security = tls_cluster
    _, path, expected = points
    files = {}
    for name, pem in (("ca", security.tls_ca_file), ("cert", security.tls_client_cert),
                      ("key", security.tls_client_key)):
        files[name] = tmp_path / f"{name}.pem"
        files[name].write_text(pem)
    env = _env(DASK_DISTRIBUTED__COMM__TLS__CA_FILE=str(files["ca"]),
               DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT=str(files["cert"]),
               DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY=str(files["key"]),
               DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION="True")
    proc = run_cli(["join", path, "--eps", EPS, "--count", "--scheduler", cluster.scheduler_address], tmp_path, env=env)
    assert proc.returncode == 0, _explain(proc)
    assert proc.stdout.strip() == str(expected)
    plain = run_cli(["join", path, "--eps", EPS, "--count", "--scheduler", cluster.scheduler_address], tmp_path,
                    env=_env(DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT="5s"), timeout=120)
    assert plain.returncode == 2, "a client without the certificates reached a TLS-only scheduler"
    assert "no client certificate is configured" in plain.stderr and "Traceback" not in plain.stderr, _explain(plain)
