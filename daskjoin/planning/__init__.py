"""Planning: reads metadata and samples only, and cuts a join into partitions that fit memory."""
