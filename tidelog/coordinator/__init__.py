"""Consumer groups: membership, rebalances and committed offsets in `__consumer_offsets`."""
