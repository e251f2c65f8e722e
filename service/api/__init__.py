"""The HTTP front door for approvers, auditors and admins (FastAPI)."""
