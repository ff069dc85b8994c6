"""What the server reports at /metrics (serve/metrics.py): requests by route and status,
errors apart, batches and tokens, each server's counters its own, in Prometheus' text
format."""

from __future__ import annotations

from transformer_nmt.serve.metrics import ServerMetrics


def value(metrics: ServerMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_requests_are_counted_by_route_and_status_and_errors_apart():
    metrics = ServerMetrics()
    metrics.observe_request("/v1/translate", 200, 0.02)
    metrics.observe_request("/v1/translate", 200, 0.3)
    metrics.observe_request("/v1/translate", 422, 0.001)
    assert value(metrics, "nmt_requests_total", route="/v1/translate", status="200") == 2
    assert value(metrics, "nmt_request_errors_total", route="/v1/translate",
                 status="422") == 1
    assert value(metrics, "nmt_request_errors_total", route="/v1/translate",
                 status="200") is None
    assert value(metrics, "nmt_request_latency_seconds_count", route="/v1/translate") == 3
    assert value(metrics, "nmt_request_latency_seconds_bucket", route="/v1/translate",
                 le="0.025") == 2


def test_batches_count_sentences_and_tokens_and_the_last_batchs_speed():
    metrics = ServerMetrics()
    metrics.observe_batch(8, 100, 120, 0.5)
    metrics.observe_tokens(10, 30, 0.0)  # no time measured: the speed stays the last one
    assert value(metrics, "nmt_batch_sentences_count") == 1
    assert value(metrics, "nmt_batch_sentences_bucket", le="8.0") == 1
    assert value(metrics, "nmt_batch_sentences_bucket", le="4.0") == 0
    assert (value(metrics, "nmt_source_tokens_total"),
            value(metrics, "nmt_target_tokens_total")) == (110, 150)
    assert value(metrics, "nmt_decode_target_tokens_per_second") == 240


def test_each_server_has_its_own_counters_in_prometheus_text():
    one, other = ServerMetrics(), ServerMetrics()
    one.observe_request("/translate", 200, 0.1)
    assert value(other, "nmt_requests_total", route="/translate", status="200") is None
    text = one.exposition().decode()
    assert 'nmt_requests_total{route="/translate",status="200"} 1.0' in text
    assert "# HELP nmt_queue_sentences Sentences waiting to be decoded" in text
    assert one.content_type.startswith("text/plain")
