"""Join kinds: what each kind's tasks do with one partition (its *job*; see :mod:`daskjoin.execution.task`).

- :mod:`.epsilon`: the ε-join (``similarity_join``)
- :mod:`.sets`: the set-similarity join (``set_similarity_join``)
"""
