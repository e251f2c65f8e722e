"""The shop's carrier integration, simulated: tracking comes from the shop's own
tables after a configurable network latency, bounded by a timeout."""

from __future__ import annotations

import time

from sqlmodel import Session

from service.config import Settings
from service.shop import errors, repository
from service.shop.models import Shipment, TrackingEvent


def fetch_tracking(session: Session, shipment: Shipment, settings: Settings) -> list[TrackingEvent]:
    """Ask the carrier for tracking events; a carrier slower than the timeout fails transiently."""
    latency, timeout = settings.shop_carrier_latency_ms, settings.shop_carrier_timeout_ms
    if latency > timeout:
        time.sleep(timeout / 1000)  # we wait as long as we are willing to, then give up
        raise errors.upstream_timeout(shipment.carrier, timeout)
    time.sleep(latency / 1000)
    assert shipment.id is not None
    return repository.tracking_events(session, shipment.id)
