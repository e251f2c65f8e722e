"""Drafts: versioned, idempotent records of proposed writes (DESIGN.md §3)."""
