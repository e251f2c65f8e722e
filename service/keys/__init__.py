"""Approver signing keys: public halves registered per approver and tenant."""
