"""Opaque bearer tokens, stored only as SHA-256 digests."""
