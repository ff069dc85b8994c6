"""The fairseq side of the quickstart's comparison: fairseq trained as the quickstart
trains, on the same prepared data, for the same time, on this machine.

fairseq is not a dependency of the project. This script installs fairseq 0.12.2, its
newest release, into a virtual environment of its own (under --work), with the PyTorch
version of the project's environment, and runs its command-line tools there:

1. the prepared data's text, cut into pieces by its own sentencepiece model, binarized by
   `fairseq-preprocess` with one dictionary for both languages;
2. `fairseq-train` of the same architecture and regime as `nmt quickstart`, read from the
   project (`quickstart.training_overrides` over the preset): layers, widths, heads,
   embeddings shared three ways, dropout, label smoothing 0.1, Adam's betas and epsilon,
   the inverse square root schedule with the same warm-up and peak learning rate, the same
   tokens per update, for --minutes of wall time (`--stop-time-hours`), in float32 on
   the CPU (fairseq's own CPU precision), a checkpoint every --save-every updates;
3. the last --average-last checkpoints averaged;
4. the test split decoded by `fairseq-generate` with beam 4 (fairseq's length penalty 1.0,
   the quickstart's GNMT alpha 0.6 having no equivalent there) and scored with sacreBLEU
   and chrF exactly as `nmt evaluate` scores (transformer_nmt.evaluate.score).

It prints one JSON line. Nothing else may run on the machine meanwhile: the budget is time.

    python bench/fairseq_quickstart.py --data quickstart/data/bible-en-de --work runs/fairseq

fairseq 0.12.2 predates Python 3.11, which refuses a dataclass field whose default is an
instance of another (non-frozen) dataclass, as fairseq's and Hydra 1.0's configurations
have; the installation rewrites those defaults as `field(default_factory=...)`, which
means the same (and fairseq's registration of its configuration groups to read them), and
turns off its fast inference path, written for PyTorch 1.12-1.13's fused encoder layer.
Its C++ extensions (edit distances for non-autoregressive models, BLEU in C) are not
built: translation does not use them. Its checkpoints hold Python objects,
which PyTorch 2.6 and later load only with TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1; it is set
for fairseq's processes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import sentencepiece
import torch

from transformer_nmt.config import get_preset
from transformer_nmt.data.manifest import SPM_MODEL, read_manifest
from transformer_nmt.evaluate import read_text, score
from transformer_nmt.quickstart import QuickstartOptions, training_overrides
from transformer_nmt.training.run import parse_assignment

FAIRSEQ = "fairseq==0.12.2"
REQUIREMENTS = [
    "pip<24.1",  # omegaconf 2.0.6's metadata ("PyYAML (>=5.1.*)") is refused by later pips
]
DEPENDENCIES = [
    f"torch=={torch.__version__.split('+')[0]}", "numpy<1.24", "cython<3", "setuptools",
    "wheel", "cffi", "regex", "tqdm", "bitarray", "sacrebleu", "hydra-core==1.0.7",
    "omegaconf==2.0.6",
]
"""fairseq 0.12.2's requirements without torchaudio (speech only, imported lazily; its
releases pin a torch of their own), and what building it from source needs."""

DATACLASS_FILES = ("fairseq/dataclass/configs.py",
                   "fairseq/models/transformer/transformer_config.py", "hydra/conf/__init__.py")
INSTANCE_DEFAULT = re.compile(r"^(\s+\w+: [^=\n]+?) = ([A-Z]\w*)\(\)\s*$", re.MULTILINE)
FIELD_INSTANCE_DEFAULT = re.compile(r"field\(default=([A-Z]\w*)\(\)")


def run(command: list[str], what: str, **kwargs) -> subprocess.CompletedProcess:
    """Run `command`; on failure stop with `what` and the end of its output."""
    result = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        tail = (result.stdout + result.stderr)[-3000:]
        raise SystemExit(f"{what} failed ({' '.join(command[:3])} ...):\n{tail}")
    return result


def default_factories(path: Path) -> None:
    """Rewrite `name: T = T()` and `field(default=T())` as default factories (Python 3.11
    refuses a dataclass instance as a field's default)."""
    text = path.read_text(encoding="utf-8")
    text = INSTANCE_DEFAULT.sub(r"\1 = field(default_factory=\2)", text)
    text = FIELD_INSTANCE_DEFAULT.sub(r"field(default_factory=\1", text)
    if not re.search(r"^from dataclasses import .*\bfield\b", text, re.MULTILINE):
        text = "from dataclasses import field\n" + text
    path.write_text(text, encoding="utf-8")


def install(work: Path, python: str) -> Path:
    """fairseq in a virtual environment of its own under `work`; its bin directory."""
    venv = work / "venv"
    bin_dir = venv / "bin"
    if (bin_dir / "fairseq-train").exists():
        return bin_dir
    run([python, "-m", "venv", str(venv)], "creating fairseq's virtual environment")
    pip = [str(bin_dir / "python"), "-m", "pip", "install", "--quiet"]
    run(pip + REQUIREMENTS, "installing pip")
    run(pip + DEPENDENCIES, "installing fairseq's dependencies")
    source = work / "source"
    run([str(bin_dir / "python"), "-m", "pip", "download", "--quiet", "--no-deps",
         "--no-binary", ":all:", "--no-build-isolation", "-d", str(source), FAIRSEQ],
        "downloading fairseq's source")
    (archive,) = source.glob("fairseq-*.tar.gz")
    with tarfile.open(archive) as tar:
        # The "data" filter (no absolute paths, links out or devices) where this Python has it.
        tar.extractall(source, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    tree = source / archive.name.removesuffix(".tar.gz")
    setup = tree / "setup.py"
    setup.write_text(setup.read_text(encoding="utf-8").replace(
        "from torch.utils import cpp_extension", "raise ImportError  # no C++ extensions"),
        encoding="utf-8")
    run(pip + ["--no-build-isolation", "--no-deps", str(tree)], "building fairseq")
    site = Path(run([str(bin_dir / "python"), "-c",
                     "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                    "finding fairseq's site-packages").stdout.strip())
    for name in DATACLASS_FILES:
        default_factories(site / name)
    # hydra_init registers each configuration group by its field's default, which a
    # default factory leaves MISSING: the factory's product is the same default.
    initialize = site / "fairseq" / "dataclass" / "initialize.py"
    initialize.write_text("from dataclasses import MISSING\n" + initialize.read_text(
        encoding="utf-8").replace(
        "v = FairseqConfig.__dataclass_fields__[k].default",
        "v = FairseqConfig.__dataclass_fields__[k]\n"
        "        v = v.default if v.default_factory is MISSING else v.default_factory()"),
        encoding="utf-8")
    # Its fast inference path calls torch._transformer_encoder_layer_fwd as PyTorch
    # 1.12-1.13 defined it; later versions ask for a mask type it does not pass.
    for name in ("fairseq/modules/transformer_layer.py",
                 "fairseq/models/transformer/transformer_encoder.py"):
        path = site / name
        path.write_text(path.read_text(encoding="utf-8").replace(
            "BT_version = True", "BT_version = False"), encoding="utf-8")
    return bin_dir


def pieces(data: Path, work: Path, languages: tuple[str, str]) -> Path:
    """The prepared splits' text in sentencepiece pieces, one sentence a line."""
    out = work / "pieces"
    out.mkdir(parents=True, exist_ok=True)
    model = sentencepiece.SentencePieceProcessor(model_file=str(data / SPM_MODEL))
    for split in ("train", "valid", "test"):
        for language in languages:
            lines = read_text(data / f"{split}.{language}")
            encoded = model.encode(lines, out_type=str)
            (out / f"{split}.{language}").write_text(
                "".join(" ".join(sentence) + "\n" for sentence in encoded), encoding="utf-8")
    return out


def recipe(minutes: float, overrides: list[tuple[str, str]]) -> dict[str, str]:
    """The quickstart's training settings: its preset's, with its overrides on top (and
    the candidate's, given as `nmt quickstart --set` takes them)."""
    options = QuickstartOptions(minutes=minutes, overrides=overrides)
    preset = get_preset(options.preset)
    settings = {name: str(value) for name, value in vars(preset.model).items()}
    settings.update({name: str(value) for name, value in vars(preset.train).items()})
    settings.update(dict(training_overrides(options)))
    return settings


def train_command(bin_dir: Path, binarized: Path, checkpoints: Path, settings: dict[str, str],
                  minutes: float, save_every: int, keep: int) -> list[str]:
    """fairseq-train with the quickstart's architecture and regime."""
    d_model, warmup = int(settings["d_model"]), int(settings["warmup_steps"])
    # Eq. (3) of the paper peaks at lr_scale * d_model^-0.5 * warmup^-0.5 after warm-up and
    # then falls as step^-0.5: fairseq's inverse_sqrt with that peak is the same curve.
    peak = float(settings["lr_scale"]) * d_model ** -0.5 * warmup ** -0.5
    return [
        str(bin_dir / "fairseq-train"), str(binarized), "--cpu", "--arch", "transformer",
        "--encoder-layers", settings["encoder_layers"], "--decoder-layers", settings["decoder_layers"],
        "--encoder-embed-dim", str(d_model), "--decoder-embed-dim", str(d_model),
        "--encoder-ffn-embed-dim", settings["d_ff"], "--decoder-ffn-embed-dim", settings["d_ff"],
        "--encoder-attention-heads", settings["heads"], "--decoder-attention-heads", settings["heads"],
        "--share-all-embeddings", "--max-source-positions", settings["max_positions"],
        "--max-target-positions", settings["max_positions"],
        "--dropout", settings["dropout"], "--attention-dropout", settings["attention_dropout"],
        "--activation-dropout", settings["activation_dropout"],
        "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", settings["label_smoothing"],
        "--optimizer", "adam", "--adam-betas", f"({settings['adam_beta1']}, {settings['adam_beta2']})",
        "--adam-eps", settings["adam_eps"], "--lr", f"{peak:.6g}", "--lr-scheduler", "inverse_sqrt",
        "--warmup-updates", str(warmup), "--warmup-init-lr", "1e-7",
        "--max-tokens", settings["batch_tokens"], "--stop-time-hours", f"{minutes / 60:.6f}",
        "--save-dir", str(checkpoints), "--save-interval-updates", str(save_every),
        "--keep-interval-updates", str(keep), "--no-epoch-checkpoints",
        "--seed", settings["seed"], "--num-workers", "0", "--log-format", "json",
        "--log-interval", "100",
    ]


AVERAGE = """
import json, re, sys, torch
paths = sorted(sys.argv[2:], key=lambda p: int(re.search(r"_(\\d+)\\.pt$", p).group(1)))
states = [torch.load(p, map_location="cpu", weights_only=False) for p in paths]
merged = states[-1]
for name, value in merged["model"].items():
    if value.is_floating_point():
        merged["model"][name] = sum(s["model"][name].double() for s in states).div(len(states)).to(value.dtype)
torch.save(merged, sys.argv[1])
history = merged["optimizer_history"][-1]
epoch = merged["extra_state"].get("train_iterator", {}).get("epoch")
print(json.dumps({"steps": history["num_updates"], "epoch": epoch,
                  "averaged": [p.rsplit("/", 1)[-1] for p in paths]}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True,
                        help="a prepared data directory (nmt prepare, or the quickstart's)")
    parser.add_argument("--work", type=Path, required=True,
                        help="fairseq's environment, data, checkpoints and output")
    parser.add_argument("--minutes", type=float, default=QuickstartOptions.minutes)
    parser.add_argument("--average-last", type=int, default=QuickstartOptions.average_last)
    parser.add_argument("--save-every", type=int, default=150,
                        help="updates between checkpoints (about a minute here)")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="a setting on top of the quickstart's recipe, as `nmt quickstart "
                        "--set` takes it (repeatable): the same candidate on both sides")
    parser.add_argument("--python", default=sys.executable,
                        help="the Python that fairseq's environment is made from")
    args = parser.parse_args()

    manifest = read_manifest(args.data)
    languages = (manifest["src_lang"], manifest["tgt_lang"])
    args.work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    bin_dir = install(args.work, args.python)
    installed = time.monotonic() - started
    binarized = args.work / "binarized"
    # A rerun in the same --work reuses the binarized splits of the same prepared data.
    stamp = binarized / "prepared-from.txt"
    vocabulary = hashlib.sha256((args.data / SPM_MODEL).read_bytes()).hexdigest()
    source = f"{args.data.resolve()} {vocabulary}"
    if not any(binarized.glob("train.*.bin")) or not stamp.exists() or stamp.read_text() != source:
        shutil.rmtree(binarized, ignore_errors=True)
        text = pieces(args.data, args.work, languages)
        run([str(bin_dir / "fairseq-preprocess"), "--source-lang", languages[0],
             "--target-lang", languages[1], "--trainpref", str(text / "train"),
             "--validpref", str(text / "valid"), "--testpref", str(text / "test"),
             "--destdir", str(binarized), "--joined-dictionary", "--workers", "2"],
            "fairseq-preprocess")
        stamp.write_text(source)

    environment = dict(os.environ, TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1")
    settings = recipe(args.minutes, [parse_assignment(text) for text in args.set])
    checkpoints = args.work / "checkpoints"
    # fairseq-train resumes from a checkpoint_last.pt it finds: every run starts afresh.
    shutil.rmtree(checkpoints, ignore_errors=True)
    command = train_command(bin_dir, binarized, checkpoints, settings, args.minutes,
                            args.save_every, max(args.average_last, 5))
    started = time.monotonic()
    run(command, "fairseq-train", env=environment)
    trained = time.monotonic() - started

    kept = sorted(checkpoints.glob("checkpoint_*_*.pt"),
                  key=lambda p: int(p.stem.rsplit("_", 1)[1]))[-args.average_last:]
    if not kept:
        raise SystemExit(f"fairseq-train left no interval checkpoint in {checkpoints}; "
                         "lower --save-every")
    average = args.work / "average.pt"
    averaged = json.loads(run([str(bin_dir / "python"), "-c", AVERAGE, str(average),
                               *map(str, kept)], "averaging", env=environment).stdout)

    generated = run([str(bin_dir / "fairseq-generate"), str(binarized), "--cpu",
                     "--path", str(average), "--gen-subset", "test", "--beam", "4",
                     "--max-tokens", "4096", "--remove-bpe", "sentencepiece",
                     "--source-lang", languages[0], "--target-lang", languages[1]],
                    "fairseq-generate", env=environment).stdout
    found = {}
    for line in generated.splitlines():
        if line.startswith("D-"):
            index, _, sentence = line[2:].split("\t", 2)
            found[int(index)] = sentence.strip()
    references = read_text(args.data / f"test.{languages[1]}")
    hypotheses = [found.get(i, "") for i in range(len(references))]
    result = score(hypotheses, references, languages[1])
    print(json.dumps({
        "bench": "fairseq_quickstart", "date": time.strftime("%Y-%m-%d"),
        "machine": platform.machine(), "fairseq": FAIRSEQ, "torch": torch.__version__,
        "minutes": args.minutes, "train_seconds": round(trained, 1),
        "install_seconds": round(installed, 1), "steps": averaged["steps"],
        "epoch": averaged["epoch"], "averaged": averaged["averaged"],
        "set": args.set, "dropout": settings["dropout"], "batch_tokens": settings["batch_tokens"],
        "warmup": settings["warmup_steps"], "missing_hypotheses": len(references) - len(found),
        "sacrebleu": round(result["bleu"], 2), "chrf": round(result["chrf"], 2),
        "tokenized_bleu": result.get("tokenized_bleu"),
        "command": "python bench/fairseq_quickstart.py " + " ".join(sys.argv[1:]),
    }))


if __name__ == "__main__":
    main()
