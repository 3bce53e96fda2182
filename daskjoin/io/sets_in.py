"""Token sets for the set-similarity join: the public entry point of the storage layer.

The implementation is split by concern:

- :mod:`daskjoin.io.sets_store`: :class:`SetCollection` and the Zarr store
  (:func:`write_sets`, :func:`open_sets`, :func:`is_set_store`,
  :func:`read_sets_range`, :func:`read_vocab`), with the layout's invariants;
- :mod:`daskjoin.io.sets_prepare`: :func:`prepare_sets`, :func:`prepare_flat`,
  :func:`align`, and its parts :func:`common_ranking` and :func:`rerank_tokens`;
- :mod:`daskjoin.io.sets_import`: :func:`import_sets_text`,
  :func:`import_sets_parquet` and :func:`import_sets`.
"""
from __future__ import annotations

from .sets_import import import_sets, import_sets_parquet, import_sets_text
from .sets_prepare import align, common_ranking, prepare_flat, prepare_sets, rerank_tokens
from .sets_store import (SetCollection, check_collection, is_set_store, open_sets, read_sets_range, read_vocab,
                         write_sets)

__all__ = [
    "SetCollection",
    "align",
    "check_collection",
    "common_ranking",
    "import_sets",
    "import_sets_parquet",
    "import_sets_text",
    "is_set_store",
    "open_sets",
    "prepare_flat",
    "prepare_sets",
    "read_sets_range",
    "read_vocab",
    "rerank_tokens",
    "write_sets",
]
