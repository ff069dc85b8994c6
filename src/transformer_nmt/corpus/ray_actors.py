"""The ray backend: the shards to do as a Ray Data dataset, one row per shard, translated
by a pool of actors each holding one Translator, on this machine or on a cluster; an
actor that dies is restarted by Ray and its shard translated again, a bounded number of
times."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from transformer_nmt.corpus.options import CorpusOptions
from transformer_nmt.corpus.shards import ShardTask, translate_shard
from transformer_nmt.decode.device.threads import decoding_threads, use_cores
from transformer_nmt.decode.text.translator import Translator, TranslatorOptions
from transformer_nmt.errors import UserError
from transformer_nmt.files import write_json_atomic

RAY_ATTEMPTS = 3
"""How many actors a shard may be given under the ray backend: Ray restarts a dead actor
and retries its shard without end, and a shard that kills every actor it is given (out
of memory, say) would never end."""


def _started_path(task: ShardTask) -> Path:
    """The mark a Ray actor leaves while it translates `task`, counting the actors given
    it: found by the next one, it says that the shard is being redone."""
    return Path(task.output).with_suffix(".started")


def _start_ray_shard(task: ShardTask) -> bool:
    """Count an attempt at `task` in its mark; whether it is being redone. UserError
    when it has had RAY_ATTEMPTS already."""
    started = _started_path(task)
    started.parent.mkdir(parents=True, exist_ok=True)
    try:
        attempts = int(json.loads(started.read_text(encoding="utf-8")))
    except (FileNotFoundError, ValueError, TypeError):
        attempts = 0
    if attempts >= RAY_ATTEMPTS:
        started.unlink()
        raise UserError(f"shard {task.number} ({task.path} lines {task.start + 1}-"
                        f"{task.end}): its Ray actor died {attempts} times (out of "
                        "memory?); run the command again to retry, or with fewer --workers")
    write_json_atomic(started, attempts + 1)
    return attempts > 0


class _RayShardTranslator:
    """A Ray Data actor: one Translator, built once on its share of the cores, translating
    a batch of shard rows into their files and records."""

    def __init__(self, models: tuple[str, ...], options: TranslatorOptions, cores: int,
                 as_json: bool, errors: str) -> None:
        use_cores(cores)
        self.translator = Translator.from_files(models, options)
        self.as_json, self.errors = as_json, errors

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        fields = ShardTask.__dataclass_fields__
        rows: list[dict[str, Any]] = []
        for values in zip(*(batch[name] for name in fields)):
            task = ShardTask(*(getattr(value, "item", lambda: value)() for value in values))
            redone = _start_ray_shard(task)
            record = translate_shard(self.translator, task, self.as_json, self.errors)
            _started_path(task).unlink()
            rows.append({"number": task.number, **record, "redone": redone})
        return {key: np.array([row[key] for row in rows]) for key in
                ("number", "sha256", "sentences", "tokens", "redone")}


def translate_with_ray(options: CorpusOptions, tasks: list[ShardTask], done) -> int:
    """The shards of `tasks` as a Ray Data dataset, one row each, translated by a pool of
    Ray actors (`--workers` of them, each on its share of this machine's cores); Ray
    Data restarts an actor that dies and retries its shard (its default, which
    `_start_ray_shard` bounds). Ray is started here and stopped after, unless it is
    running already. Returns how many shards were redone."""
    try:
        import ray
        import ray.data
    except ImportError:
        raise UserError("--backend ray needs Ray: pip install 'transformer-nmt[ray]'") from None
    resolved = options.translator.resolved()
    actors = min(resolved.workers, len(tasks))
    cores = decoding_threads(resolved.workers, resolved.device, resolved.threads)
    started_here = not ray.is_initialized()
    if started_here:
        if options.ray_address is None:
            ray.init(num_cpus=actors * cores, include_dashboard=False)
        else:
            ray.init(address=options.ray_address)
    try:
        # Ray Data keeps half of the cluster's CPUs in reserve for other operators by
        # default, and queues up to four rows on the first actor that is ready: on one
        # machine started for this job, either ran one actor of --workers at a time. A
        # shard is long work: one at a time per actor, no reserve.
        ray.data.DataContext.get_current().op_resource_reservation_enabled = False
        rows = [asdict(task) for task in tasks]
        shards = ray.data.from_items(rows, override_num_blocks=len(rows)).map_batches(
            _RayShardTranslator, batch_size=1, num_cpus=cores,
            compute=ray.data.ActorPoolStrategy(size=actors, max_tasks_in_flight_per_actor=1),
            fn_constructor_args=(options.models, replace(resolved, workers=1, threads=cores),
                                 cores, options.output_format == "json", options.errors))
        redone = 0
        try:
            for row in shards.iter_rows():
                redone += bool(row["redone"])
                done(int(row["number"]), {"sha256": str(row["sha256"]),
                                          "sentences": int(row["sentences"]),
                                          "tokens": int(row["tokens"])})
        except ray.exceptions.RayError as error:
            raise _user_error_in(error) or error
        return redone
    finally:
        if started_here:
            ray.shutdown()


def _user_error_in(error: BaseException) -> UserError | None:
    """The UserError an actor raised, found among the causes Ray wraps it in."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if type(error) is UserError:
            return error
        seen.add(id(error))
        error = getattr(error, "cause", None) or error.__cause__
    return None
