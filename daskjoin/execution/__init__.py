"""Execution: the only place that builds Dask graphs (dd.from_map, client.map/submit)."""
