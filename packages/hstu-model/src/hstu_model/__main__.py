"""`python -m hstu_model describe --preset NAME [--config FILE] [--set section.field=value ...]`.

Prints one JSON object: the effective config (preset < file < environment < --set), every
embedding table (the id tables and one per contextual feature) with its rows, width and
features, the parameter counts, the memory floor of training (`hstu_model.memory`: tables with
their Adagrad state, dense parameters with Adam's) and the analytical FLOPs per sample
(`hstu_model.flops`). The
counts come from building the whole model on the meta device, which allocates no storage (the
yambda-5b tables alone would take about 600 GB).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from hstu_model import flops
from hstu_model.config import (
    DEFAULT_VOCABS,
    ID_TABLES,
    PRESETS,
    ConfigError,
    HSTUConfig,
)
from hstu_model.memory import training_memory
from hstu_model.model import HSTURanker
from hstu_model.overrides import resolve_config

META = torch.device("meta")


def parse_vocab(text: str) -> dict[str, int]:
    """`uid=400,item_id=80000` -> {"uid": 400, "item_id": 80000}."""
    vocab = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, rows = item.partition("=")
        try:
            if not sep:
                raise ValueError
            vocab[name.strip()] = int(rows.replace("_", ""))
        except ValueError:
            raise ConfigError(f"--vocab: expected table=rows, got {item!r}") from None
    return vocab


def describe(preset_name: str, config: HSTUConfig, vocab: Mapping[str, int]) -> dict[str, Any]:
    """The JSON-ready description of `config` with id tables of `vocab` rows."""
    dim = config.model.embedding_dim
    unknown = sorted(set(vocab) - set(ID_TABLES))
    if unknown:
        raise ConfigError(
            f"--vocab: unknown table(s) {', '.join(unknown)} (known: {', '.join(ID_TABLES)}; "
            "contextual tables take their rows from model.contextual_features)"
        )
    # The whole model on the meta device: every parameter has its shape, none has storage.
    ranker = HSTURanker(config.model, vocab, device=META)
    tables = ranker.tables
    weights = ranker.embedding_collection.embeddings
    per_table = {t.name: weights[t.name].weight.numel() for t in tables}
    embedding_total = sum(per_table.values())
    dense = sum(p.numel() for p in ranker.dense_parameters())
    notes: list[str] = []
    return {
        "preset": preset_name,
        "config": config.to_dict(),
        "embedding_tables": [
            {
                "name": t.name,
                "rows": t.num_embeddings,
                "dim": dim,
                "features": list(t.feature_names),
            }
            for t in tables
        ],
        "parameters": {
            "embedding": per_table,
            "embedding_total": embedding_total,
            "dense": dense,
            "total": embedding_total + dense,
        },
        "memory_floor": dataclasses.asdict(training_memory(config.model, vocab)),
        "notes": notes,
        "flops_per_sample": flops.summary(config.model),
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m hstu_model")
    commands = parser.add_subparsers(dest="command", required=True)
    desc = commands.add_parser(
        "describe",
        help="print the effective config, embedding tables, parameter counts and FLOPs/sample",
    )
    desc.add_argument("--preset", required=True, choices=sorted(PRESETS))
    desc.add_argument("--config", metavar="FILE", help="TOML, JSON or YAML overrides file")
    desc.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.FIELD=VALUE",
        help="override one field (repeatable); beats the file and HSTU_* variables",
    )
    desc.add_argument(
        "--vocab",
        metavar="TABLE=ROWS,...",
        help="table rows, e.g. uid=400,item_id=80000 (default: the preset's own sizes)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = resolve_config(args.preset, file=args.config, cli=args.overrides)
        vocab = dict(DEFAULT_VOCABS[args.preset])
        if args.vocab:
            vocab |= parse_vocab(args.vocab)
        result = describe(args.preset, config, vocab)
    except (ConfigError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        json.dump(result, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, as SIGPIPE would
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (the exit's flush)
        return 128 + signal.SIGPIPE
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
