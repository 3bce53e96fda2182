"""Reading points (Zarr, numpy, dask), importing files, synthetic data and Parquet output."""
