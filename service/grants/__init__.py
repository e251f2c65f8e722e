"""Standing grants: an approver's signed approval, given in advance, of the drafts of one
action within stated limits (docs/approvals.md, "Standing grants")."""
