"""Exact set-similarity joins (Bellas & Gounaris): CPU filtering, CPU or GPU verification, Dask blocks."""
from .api import SetJoinResult, plan_set_join, set_similarity_join
from .measures import MEASURES

__all__ = ["set_similarity_join", "plan_set_join", "SetJoinResult", "MEASURES"]
