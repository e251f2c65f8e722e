"""The tamper-evident audit log: one hash chain per tenant (DESIGN.md §8)."""
