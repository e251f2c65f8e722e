"""Signed approvals and rejections of drafts (DESIGN.md §4)."""
