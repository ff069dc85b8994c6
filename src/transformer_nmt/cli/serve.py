"""`nmt serve`: a model behind an HTTP server, for applications and people."""

from __future__ import annotations

import argparse
import os

from transformer_nmt.cli.decode import _add_decode_arguments, _translator_options

API_KEY_VARIABLE = "NMT_API_KEY"
"""The environment variable that holds the API key, so that it need not appear in `ps`."""


def add_serve_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve a model over HTTP: JSON API, LibreTranslate's API and a web page",
        description="Serve a model file over HTTP (FastAPI under uvicorn; install with "
        "pip install 'transformer-nmt[serve]'). Sentences of concurrent requests are "
        "translated together in batches; texts are split into sentences and put back "
        "together with their paragraphs. Endpoints: GET / (web page), POST /v1/translate, "
        "GET /v1/model, POST /translate and GET /languages (LibreTranslate's API), GET "
        "/health, GET /ready, GET /metrics (Prometheus), GET /docs (OpenAPI). SIGTERM stops "
        "taking requests, finishes those in flight and exits 0 (Ctrl+C the same, exit 130).",
        epilog="examples: nmt serve --model quickstart/model.pt, then open "
        "http://127.0.0.1:8080/ ; curl -s localhost:8080/v1/translate -H 'Content-Type: "
        "application/json' -d '{\"text\": \"In the beginning.\"}'",
    )
    parser.add_argument("--model", required=True, metavar="MODEL.pt",
                        help="model file: a checkpoint of `nmt train` or the output of "
                        "`nmt average`")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1: this machine only; "
                        "0.0.0.0 for every interface)")
    parser.add_argument("--port", type=int, default=8080, help="TCP port (default 8080)")
    batching = parser.add_argument_group("batching across requests")
    batching.add_argument("--max-batch-tokens", type=int, default=4096, metavar="N",
                          help="most source tokens decoded in one batch, from any number of "
                          "requests (default 4096); a batch also holds at most --batch-size "
                          "sentences, and --workers batches are decoded side by side, each "
                          "taking the next as soon as it is done")
    batching.add_argument("--max-wait-ms", type=float, default=5.0, metavar="MS",
                          help="longest a sentence waits for others to share an idle "
                          "decoder's batch (default 5)")
    limits = parser.add_argument_group("limits (over them: HTTP 413, 429, 504)")
    limits.add_argument("--max-characters", type=int, default=20000, metavar="N",
                        help="most characters per request (default 20000)")
    limits.add_argument("--max-sentences", type=int, default=200, metavar="N",
                        help="most sentences per request (default 200)")
    limits.add_argument("--max-queue", type=int, default=2000, metavar="N",
                        help="most sentences waiting across all requests (default 2000)")
    limits.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                        help="longest a request may wait for its translation (default 60)")
    limits.add_argument("--max-beam", type=int, default=16, metavar="N",
                        help="widest beam a caller may ask for (default 16)")
    access = parser.add_argument_group("access")
    access.add_argument("--api-key", metavar="KEY",
                        help=f"require this key on every translation endpoint (X-API-Key "
                        f"header, or api_key in LibreTranslate requests); default: the "
                        f"{API_KEY_VARIABLE} environment variable, else no key")
    access.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                        help="let web pages from ORIGIN call the API (repeatable; default: "
                        "none)")
    parser.add_argument("--log-level", default="info",
                        choices=["critical", "error", "warning", "info", "debug"],
                        help="uvicorn's log level (default info)")
    _add_decode_arguments(parser)
    parser.set_defaults(func=run_serve)


def run_serve(args: argparse.Namespace) -> None:
    from transformer_nmt.errors import UserError

    try:
        from transformer_nmt.serve.server import serve
        from transformer_nmt.serve.settings import ServeSettings
    except ImportError as error:
        raise UserError(f"nmt serve needs the serve extra ({error.name} is missing): "
                        "pip install 'transformer-nmt[serve]'") from None
    settings = ServeSettings(
        host=args.host, port=args.port, max_batch_tokens=args.max_batch_tokens,
        max_wait_ms=args.max_wait_ms, max_characters=args.max_characters,
        max_sentences=args.max_sentences, max_queue=args.max_queue, timeout_s=args.timeout,
        max_beam=args.max_beam, max_nbest=args.max_beam,
        api_key=args.api_key if args.api_key is not None else os.environ.get(API_KEY_VARIABLE),
        cors_origins=tuple(args.cors_origin))
    serve(args.model, _translator_options(args), settings, log_level=args.log_level)
