"""Peers that bench/b5_peer.py compares draftgate with, each built as its own docs show."""
