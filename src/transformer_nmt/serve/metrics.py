"""What the server reports at /metrics, in Prometheus' text format (prometheus-client).

Each server has its own registry, so that several apps in one process (tests) do not
share counters."""

from __future__ import annotations

from prometheus_client import (CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge,
                               Histogram, generate_latest)

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


class ServerMetrics:
    """The server's counters, gauges and histograms."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        registry = self.registry
        self.requests = Counter("nmt_requests", "HTTP requests answered, by route and status",
                                ["route", "status"], registry=registry)
        self.errors = Counter("nmt_request_errors", "Requests answered with a 4xx or 5xx "
                              "status, by route and status", ["route", "status"],
                              registry=registry)
        self.latency = Histogram("nmt_request_latency_seconds", "Time to answer a request",
                                 ["route"], buckets=LATENCY_BUCKETS, registry=registry)
        self.batch_sentences = Histogram("nmt_batch_sentences", "Sentences per decoded batch",
                                         buckets=BATCH_BUCKETS, registry=registry)
        self.queue = Gauge("nmt_queue_sentences", "Sentences waiting to be decoded",
                           registry=registry)
        self.source_tokens = Counter("nmt_source_tokens", "Source tokens translated",
                                     registry=registry)
        self.target_tokens = Counter("nmt_target_tokens", "Target tokens produced",
                                     registry=registry)
        self.tokens_per_second = Gauge("nmt_decode_target_tokens_per_second",
                                       "Target tokens per second of the last batch",
                                       registry=registry)

        self.models_loaded = Gauge("nmt_models_loaded", "Models in memory",
                                   registry=registry)
        self.model_loads = Counter("nmt_model_loads", "Models loaded since the server "
                                   "started (at start, or on demand after an unload)",
                                   registry=registry)

    def observe_request(self, route: str, status: int, seconds: float) -> None:
        """Count one answered request."""
        self.requests.labels(route, str(status)).inc()
        if status >= 400:
            self.errors.labels(route, str(status)).inc()
        self.latency.labels(route).observe(seconds)

    def observe_batch(self, sentences: int, source_tokens: int, target_tokens: int,
                      seconds: float) -> None:
        """Count one decoded batch."""
        self.batch_sentences.observe(sentences)
        self.observe_tokens(source_tokens, target_tokens, seconds)

    def observe_tokens(self, source_tokens: int, target_tokens: int, seconds: float) -> None:
        """Count tokens translated in `seconds`."""
        self.source_tokens.inc(source_tokens)
        self.target_tokens.inc(target_tokens)
        if seconds > 0:
            self.tokens_per_second.set(target_tokens / seconds)

    def exposition(self) -> bytes:
        """Every metric in Prometheus' text format."""
        return generate_latest(self.registry)
