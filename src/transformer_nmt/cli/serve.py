"""`nmt serve`: a model behind an HTTP server, for applications and people."""

from __future__ import annotations

import argparse
import dataclasses
import os

from transformer_nmt.cli.decode import _add_decode_arguments, _translator_options
from transformer_nmt.cli.flags import add_fields, field_values
from transformer_nmt.serve.listen import listening_sockets
from transformer_nmt.serve.settings import ServeSettings, environment_variable


def _environment_epilog() -> str:
    """What the help says of the NMT_* variables, naming each."""
    names = ", ".join(environment_variable(field.name)
                      for field in dataclasses.fields(ServeSettings))
    return ("environment: every server setting (the options before the search ones) also "
            f"reads an environment variable, NMT_ and its name in capitals ({names}; "
            "NMT_CORS_ORIGINS comma-separated), so that a container needs no command line; "
            "a flag given overrides its variable. ")


def add_serve_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve a model over HTTP: JSON API, LibreTranslate's API and a web page",
        description="Serve a model file over HTTP (FastAPI under uvicorn; install with "
        "pip install 'transformer-nmt[serve]'). Sentences of concurrent requests are "
        "translated together in batches; texts are split into sentences and put back "
        "together with their paragraphs. Endpoints: GET / (web page), POST /v1/translate, "
        "GET /v1/models (every model and pair; GET /v1/model on a one-model server), POST "
        "/translate, POST /detect, GET /languages, POST /translate_file and GET "
        "/frontend/settings (LibreTranslate's API), GET /health, GET /ready, GET /metrics (Prometheus), GET /docs (OpenAPI). SIGTERM stops "
        "taking requests, finishes those in flight and exits 0 (Ctrl+C the same, exit 130).",
        epilog=_environment_epilog() + "examples: nmt serve --model quickstart/model.pt, then open "
        "http://127.0.0.1:8080/ ; nmt serve --models models/ --max-models-loaded 4 (every "
        "pair of the models in models/, at most 4 in memory); "
        "curl -s localhost:8080/v1/translate -H 'Content-Type: "
        "application/json' -d '{\"text\": \"In the beginning.\"}'",
    )
    models = parser.add_argument_group(
        "models (one server for every pair: a request's source and target choose the "
        "model; a pair without one goes through a pivot language both sides share)")
    models.add_argument("--model", action="append", default=[], metavar="MODEL.pt",
                        help="model file: a checkpoint of `nmt train`, the output of `nmt "
                        "average` or a directory of `nmt export --to safetensors` "
                        "(repeatable, one per language pair)")
    models.add_argument("--models", action="append", default=[], metavar="DIR",
                        help="serve every model file (.pt) and exported model directory "
                        "right under DIR (repeatable)")
    groups = {
        "models": models,
        "batching": parser.add_argument_group("batching across requests"),
        "limits": parser.add_argument_group("limits (over them: HTTP 413, 429, 504)"),
        "connections": parser.add_argument_group(
            "connections (a client that sends too slowly is cut off: HTTP 408 or closed)"),
        "access": parser.add_argument_group("access"),
    }
    add_fields(parser, ServeSettings, groups=groups, unset=True)
    # One token budget, the queue's (--max-batch-tokens), which the translator's batches
    # keep too; the --max-tokens of translate and evaluate says where it went.
    _add_decode_arguments(parser, max_tokens=False)
    parser.add_argument("--max-tokens", action=_Renamed, nargs="?", help=argparse.SUPPRESS)
    parser.set_defaults(func=run_serve)


class _Renamed(argparse.Action):
    """--max-tokens on `nmt serve`: refused in one line naming the option that took its
    place."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        parser.error(f"{option_string} is not an option of nmt serve: a batch's tokens, "
                     "across every request, are limited by --max-batch-tokens "
                     "(NMT_MAX_BATCH_TOKENS)")


SERVER_OMP_WAIT_POLICY = "PASSIVE"
"""OpenMP's wait policy in the server unless the user sets OMP_WAIT_POLICY: idle threads
sleep instead of spinning: beside busy processes, spinning threads take the cores from
the neighbours and from each other, while a quiet server was measured no slower with
passive ones."""
SERVER_GOMP_SPINCOUNT = "30000"
"""How long (in GNU OpenMP's spins, well under a millisecond) a thread waits awake after
a parallel region before it sleeps, unless the user sets OMP_WAIT_POLICY or
GOMP_SPINCOUNT: a decoding step's regions follow each other within microseconds, and a
thread woken from sleep for each of them slows a lone sentence markedly; a spin this
short still sleeps between requests and beside busy neighbours."""


def run_serve(args: argparse.Namespace) -> None:
    from transformer_nmt.errors import UserError

    # Read by OpenMP when torch loads it, which the import below does first.
    if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
        os.environ["GOMP_SPINCOUNT"] = SERVER_GOMP_SPINCOUNT
    os.environ.setdefault("OMP_WAIT_POLICY", SERVER_OMP_WAIT_POLICY)
    settings = ServeSettings.from_environment(
        os.environ, **field_values(args, ServeSettings, given_only=True))
    if not args.model and not args.models:
        raise UserError("nmt serve needs a model: --model MODEL.pt (repeatable) or --models "
                        "DIR")
    # Bound before the server's modules load (PyTorch takes seconds to import), so that a
    # busy port or a wrong host is said at once.
    sockets = listening_sockets(settings.host, settings.port)
    try:
        serve, options = _server(), _translator_options(args)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    serve(sockets, args.model, options, settings, log_level=settings.log_level,
          directories=args.models)


def _server():
    """serve.server.serve, imported (PyTorch, uvicorn, FastAPI), or a UserError saying
    which extra to install."""
    from transformer_nmt.errors import UserError

    try:
        from transformer_nmt.serve.server import serve
    except ImportError as error:
        raise UserError(f"nmt serve needs the serve extra ({error.name} is missing): "
                        "pip install 'transformer-nmt[serve]'") from None
    return serve
