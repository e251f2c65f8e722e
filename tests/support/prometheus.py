"""Reading a Prometheus text exposition in tests: samples by name and labels."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples_of(text: str) -> Samples:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample's value; 0 when the series is absent (a counter not yet incremented)."""
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def scrape(client: httpx.Client | None, url: str, headers: dict[str, str] | None = None) -> Samples:
    """GET ``url`` (with ``client``, or a new connection), which must answer 200 in the text
    format; its samples."""
    response = (client or httpx).get(url, headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return samples_of(response.text)
