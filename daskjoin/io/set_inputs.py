"""The inputs of a set join: where its tasks read their sets, and the two sides put in one token order."""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ..validation import InputError


@dataclass(frozen=True, eq=False)
class SetSource:
    """Where a task reads its sets: a store path (read by range) or an in-memory collection.

    ``remap`` (store only): the new rank of each of the store's ranks, for an R x S join
    whose two sides were put in one token order from their vocabularies alone; each
    range read is re-ranked on the worker, so the client never loads the sets.
    """

    path: str | None = None
    collection: object = None
    remap: np.ndarray | None = None
    missing_chunks: str = "error"  # the client's daskjoin.missing-chunks, so workers follow it

    def read(self, rows: tuple):
        """The sets of stored rows ``[lo, hi)``: (tokens, offsets, original ids)."""
        lo, hi = rows
        if self.path is not None:
            from .sets_in import read_sets_range, rerank_tokens

            part = read_sets_range(self.path, lo, hi, missing_chunks=self.missing_chunks)
            tokens = part.tokens if self.remap is None else rerank_tokens(part.tokens, part.offsets, self.remap)
        else:
            part = self.collection.slice(lo, hi)
            tokens = part.tokens
        return tokens, part.offsets, part.ids


@dataclass(frozen=True)
class SetInput:
    """A collection to join: its sizes (always in memory) and where tasks read its sets."""

    sizes: np.ndarray
    tokens: int
    source: SetSource
    collection: object = None


def open_set_input(x, name: str) -> SetInput:
    from .sets_in import SetCollection, is_set_store, prepare_sets

    if isinstance(x, (str, os.PathLike)):
        path = os.path.abspath(os.fspath(x))
        if not is_set_store(path):
            raise InputError(f"{name}: {path!r} is not a daskjoin set store (create one with `daskjoin import-sets` "
                             "or daskjoin.io.sets_in.import_sets)")
        from .sets_store import read_offsets
        from .zarr_in import missing_chunks_mode

        mode = missing_chunks_mode()
        offsets = read_offsets(path, missing_chunks=mode)
        return SetInput(np.diff(offsets), int(offsets[-1]), SetSource(path=path, missing_chunks=mode))
    if isinstance(x, SetCollection):
        coll = x
    elif isinstance(x, np.ndarray) or not hasattr(x, "__iter__") or isinstance(x, (bytes, dict)):
        raise InputError(f"{name} must be a set store path, a SetCollection or an iterable of token sets, "
                         f"got {type(x).__name__}")
    else:
        coll = prepare_sets(x)
    return SetInput(coll.sizes, coll.n_tokens, SetSource(collection=coll), coll)


def aligned_inputs(a: SetInput, b: SetInput) -> tuple[SetInput, SetInput]:
    """R x S needs one token order for both sides, worked out from the two vocabularies.

    A store side stays a store: its tasks re-rank each range they read (``SetSource.remap``),
    so neither side's sets are loaded here; an in-memory side is re-ranked here.
    """
    from .sets_prepare import common_ranking, reranked, token_counts
    from .sets_store import read_vocab

    def vocabulary(x: SetInput, name: str):
        if x.collection is not None:
            return x.collection.vocab, token_counts(x.collection, name), x.collection.vocab_kind
        return read_vocab(x.source.path, missing_chunks=x.source.missing_chunks)

    (vocab_a, count_a, kind_a), (vocab_b, count_b, kind_b) = vocabulary(a, "a"), vocabulary(b, "b")
    rank_a, rank_b, vocab, freq = common_ranking(vocab_a, count_a, kind_a, vocab_b, count_b, kind_b)

    def side(x: SetInput, new_rank) -> SetInput:
        if x.collection is None:
            return SetInput(x.sizes, x.tokens, SetSource(path=x.source.path, remap=new_rank.astype(np.int32),
                                                               missing_chunks=x.source.missing_chunks))
        c = reranked(x.collection, new_rank, vocab, freq)
        return SetInput(c.sizes, c.n_tokens, SetSource(collection=c), c)

    return side(a, rank_a), side(b, rank_b)
