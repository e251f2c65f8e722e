"""Outgoing webhooks: endpoints, signed deliveries, the delivery log."""
