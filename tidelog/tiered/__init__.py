"""Tiered storage (KIP-405 draft): rolled segments copied to a remote tier, remote indexes,
reads and rebuilds served from there."""
