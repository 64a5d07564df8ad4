"""Rolling upgrades of a local cluster through the KIP-32 phases: plan, run, canary, rollback."""
