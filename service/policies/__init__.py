"""Approval policies: how many distinct approvers a draft needs, and for how long it lives."""
