"""daskjoin: exact similarity joins at any scale (Zarr in, Dask graph of kernels, pairs out).

>>> import daskjoin as dj
>>> pairs = dj.similarity_join("points.zarr", eps=0.01)          # doctest: +SKIP
"""
from . import config as _config  # noqa: F401  (registers dask.config defaults)
from .api import JoinResult, plan_join, similarity_join
from .caches import clear_cache
from .planning.plan import Partition, Plan
from .api_sets import SetJoinResult, plan_set_join, set_similarity_join
from .api_knn import knn_join, plan_knn
from .profiling import WorkProfile, profile_work
from .validation import InputError

__version__ = "0.1.0"

__all__ = ["similarity_join", "plan_join", "knn_join", "plan_knn", "set_similarity_join", "plan_set_join", "JoinResult", "SetJoinResult", "Plan", "Partition", "InputError", "clear_cache", "profile_work", "WorkProfile", "__version__"]
