"""`python -m hstu_model describe --preset NAME [--config FILE] [--set section.field=value ...]`.

Prints one JSON object: the effective config (preset < file < environment < --set), every
embedding table with its rows, width and features, and the parameter counts. Embedding counts
are rows * dim, computed without allocating the tables; the dense count comes from building the
model's dense part on the meta device over one-row tables (dense parameters do not depend on the
table sizes).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from hstu_model.config import DEFAULT_VOCABS, PRESETS, ConfigError, HSTUConfig, ModelConfig
from hstu_model.model import HSTURanker, embedding_tables
from hstu_model.overrides import resolve_config

CONTEXTUAL_NOTE = (
    "contextual_seq_len = {n}: HSTURanker builds only one contextual token (the uid), so the "
    "dense count was taken with contextual_seq_len = 1; no parameter of this model depends on "
    "contextual_seq_len, so the count is the same. The reference's seven hashed cross tables "
    "are not modelled and not counted."
)


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


def dense_parameter_count(model: ModelConfig) -> int:
    """Parameters outside the id tables, counted on the meta device (nothing is allocated)."""
    buildable = dataclasses.replace(model, contextual_seq_len=1)
    ranker = HSTURanker(
        buildable,
        {name: 1 for name in ("uid", "item_id", "artist_id", "album_id")},
        device=torch.device("meta"),
    )
    return sum(p.numel() for p in ranker.dense_parameters())


def describe(preset_name: str, config: HSTUConfig, vocab: Mapping[str, int]) -> dict[str, Any]:
    """The JSON-ready description of `config` with tables of `vocab` rows."""
    dim = config.model.embedding_dim
    tables = embedding_tables(config.model.features, vocab)
    unknown = sorted(set(vocab) - {t.name for t in tables})
    if unknown:
        raise ConfigError(f"--vocab: unknown table(s) {', '.join(unknown)}")
    per_table = {t.name: t.num_embeddings * dim for t in tables}
    embedding_total = sum(per_table.values())
    dense = dense_parameter_count(config.model)
    notes = []
    if config.model.contextual_seq_len != 1:
        notes.append(CONTEXTUAL_NOTE.format(n=config.model.contextual_seq_len))
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
        "notes": notes,
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m hstu_model")
    commands = parser.add_subparsers(dest="command", required=True)
    desc = commands.add_parser(
        "describe", help="print the effective config, embedding tables and parameter counts"
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
    json.dump(result, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
