"""Write golden fixtures from the public MLPerf DLRMv4 reference model (DlrmHSTU) at small shapes.

The reference is never copied into this repository: this script imports it from the checkout
named by `--reference` (the `recommendation_v4` directory, the one that holds the
`generative_recommenders` package), builds a small model with the yambda-5b feature wiring (the
same feature names, contextual features, merge mapping, action weights and task as
`get_hstu_configs("yambda-5b")`, but tiny tables and widths), runs it on CPU with its PyTorch
kernels and saves what it computes:

    weights.pt       the reference's state_dict (every parameter and persistent buffer, by the
                     reference's names), the config as a plain dict, the table layout, provenance
    case_<name>.pt   one input batch (both KeyedJaggedTensors as keys/values/lengths), the
                     labels, eval- and train-mode logits, eval-mode predictions, the train-mode
                     loss and its gradient w.r.t. every parameter

Every file is a `torch.save` of plain dicts, lists, strings, numbers and CPU tensors, loadable
with `torch.load(path, weights_only=True)`. All cases share the one seeded set of weights. Each
parameter that the reference initialises to a constant (biases, norm weights, ...) is perturbed
with seeded noise before anything runs, so that a state-dict converter that drops or swaps one
of them cannot go unnoticed; the saved state_dict holds the perturbed values that were run.

Usage:

    python packages/hstu-model/scripts/make_reference_fixtures.py \
        --reference /path/to/training/recommendation_v4

The output is deterministic (one CPU thread, seeded weights and inputs): re-running it writes
the same numbers. Files are replaced atomically.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import enum
import hashlib
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hstu_model.reference_checkout import (
    CANDIDATE_KEYS,
    CROSS_NAMES,
    LISTEN_PLUS_BIT,
    MARKER,
    UIH_BATCH_KEYS,
    Reference,
    ReferenceShape,
    build_config,
    build_model,
    build_tables,
    check_reference,
    check_wiring,
    forbid_triton,
    import_reference,
)

FORMAT_VERSION = 1
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "reference"
DEFAULT_COMMIT = "a67b8459"

# ---- Shapes: the converter tests rely on exactly these. ----
EMBEDDING_DIM = 24  # every table's dim and the transducer dim D
# Rows of the id tables and of the 7 hashed crosses (in the yambda-5b token order).
ID_TABLE_ROWS = {"item_id": 61, "artist_id": 23, "album_id": 37, "uid": 11}
CROSS_TABLE_ROWS = dict(zip(CROSS_NAMES, (13, 17, 19, 29, 31, 7, 41), strict=True))
SHAPE = ReferenceShape(
    embedding_dim=EMBEDDING_DIM,
    num_heads=2,
    attn_qk_dim=12,
    attn_linear_dim=8,
    num_layers=2,
    preprocessor_hidden_dim=20,
    max_seq_len=64,
    max_num_candidates=1,
    causal_multitask_weights=0.2,
    table_rows=ID_TABLE_ROWS | CROSS_TABLE_ROWS,
)

# History action_weight values drawn from: mostly single bits, some combinations.
ACTION_WEIGHT_CHOICES = np.array([1, 1, 1, 2, 4, 4, 3, 5, 6, 7], dtype=np.int64)

# The position and time tables have sizes fixed inside the reference (8192 and 2048 + 1 rows).
# Its PyTorch position op clamps the time bucket floor(sqrt(gap / 60)) at embedding_dim - 1
# (it reads the table's width where the Triton op reads its length, 2048), and we follow the
# Triton op. The two agree only while every gap (query time - event time) stays under
# 60 * (D - 1)^2 seconds. Contextual tokens get timestamp 0, so their gap is the query time
# itself: hence every timestamp, history and query, lies in [0, MAX_TIMESTAMP).
MAX_TIMESTAMP = 60 * (EMBEDDING_DIM - 1) ** 2

# Parameters with more rows than this (the position and time tables) get row-sparse gradients.
SPARSE_GRAD_MIN_ROWS = 1000
CONSTANT_INIT_NOISE_STD = 0.1


@dataclasses.dataclass(frozen=True)
class Case:
    """One fixture batch: its name, the history length of each sample and the precision."""

    name: str
    history_lengths: tuple[int, ...]
    bf16_training: bool
    seed: int


CASES = (
    Case("short", (5, 1, 9), bf16_training=False, seed=101),
    Case("long", (17, 30, 2, 24), bf16_training=False, seed=202),
    Case("bf16", (6, 11, 3), bf16_training=True, seed=303),
)


def reference_parser(description: str, default_out: Path) -> argparse.ArgumentParser:
    """The options every fixture script of the reference takes."""
    p = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument(
        "--reference",
        type=Path,
        required=True,
        help="the reference checkout's recommendation_v4 directory (holds generative_recommenders)",
    )
    p.add_argument(
        "--reference-commit",
        default=DEFAULT_COMMIT,
        help="the reference commit, recorded in the fixtures (default %(default)s)",
    )
    p.add_argument("--out", type=Path, default=default_out, help="output directory")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = reference_parser(__doc__, DEFAULT_OUT)
    p.add_argument("--seed", type=int, default=0, help="seed of the model weights")
    return p.parse_args(argv)


def perturb_constants(model: Any, seed: int) -> list[str]:
    """Add seeded noise to every parameter that holds one constant (see the module docstring);
    returns their names."""
    gen = torch.Generator().manual_seed(seed + 2)
    perturbed = []
    with torch.no_grad():
        for name, param in model.named_parameters():
            flat = param.detach().reshape(-1)
            if flat.numel() > 0 and bool((flat == flat[0]).all()):
                param.add_(torch.randn(param.shape, generator=gen) * CONSTANT_INIT_NOISE_STD)
                perturbed.append(name)
    return perturbed


@contextlib.contextmanager
def cuda_autocast_on_cpu() -> Iterator[None]:
    """Within this block, `torch.autocast("cuda", ...)` is a CPU autocast instead.

    The reference enters `torch.autocast("cuda", dtype=torch.bfloat16)` for bf16 training, which
    does nothing to CPU tensors. To run its precision scope on CPU, the bf16 case maps that
    device type to "cpu" (same dtype, same `enabled` flag) while the model runs.
    """
    original = torch.autocast

    class CpuForCudaAutocast(original):  # type: ignore[misc,valid-type]
        def __init__(self, device_type: str, *args: Any, **kwargs: Any) -> None:
            super().__init__("cpu" if device_type == "cuda" else device_type, *args, **kwargs)

    torch.autocast = CpuForCudaAutocast  # type: ignore[misc]
    try:
        yield
    finally:
        torch.autocast = original  # type: ignore[misc]


# ---- Inputs ----


def make_inputs(case: Case) -> dict[str, Any]:
    """The case's batch as plain tensors: keys, values and lengths of both KJTs, and labels."""
    rng = np.random.default_rng(case.seed)
    batch = len(case.history_lengths)
    rows = ID_TABLE_ROWS

    def ids(table_rows: int, n: int) -> np.ndarray:
        return rng.integers(0, table_rows, size=n, dtype=np.int64)

    uih: dict[str, list[np.ndarray]] = {key: [] for key in UIH_BATCH_KEYS}
    cand: dict[str, list[np.ndarray]] = {key: [] for key in CANDIDATE_KEYS}
    labels = rng.integers(0, 2, size=batch, dtype=np.int64)
    if labels.min() == labels.max():  # both labels in every case
        labels[0] = 1 - labels[0]
    for i, length in enumerate(case.history_lengths):
        uih["uid"].append(ids(rows["uid"], 1))
        for name, cross_rows in CROSS_TABLE_ROWS.items():
            uih[name].append(ids(cross_rows, 1))
        uih["item_id"].append(ids(rows["item_id"], length))
        uih["artist_id"].append(ids(rows["artist_id"], length))
        uih["album_id"].append(ids(rows["album_id"], length))
        uih["action_weight"].append(rng.choice(ACTION_WEIGHT_CHOICES, size=length))
        timestamps = np.sort(rng.integers(0, MAX_TIMESTAMP, size=length, dtype=np.int64))
        uih["action_timestamp"].append(timestamps)
        uih["dummy_watch_time"].append(np.zeros(length, dtype=np.int64))
        query_time = timestamps[-1:].copy()
        uih["dummy_query_time"].append(query_time)
        cand["item_candidate_id"].append(ids(rows["item_id"], 1))
        cand["item_candidate_artist_id"].append(ids(rows["artist_id"], 1))
        cand["item_candidate_album_id"].append(ids(rows["album_id"], 1))
        cand["item_query_time"].append(query_time)
        cand["item_action_weight"].append(labels[i : i + 1] * LISTEN_PLUS_BIT)
        cand["item_dummy_watchtime"].append(np.ones(1, dtype=np.int64))

    def kjt(columns: dict[str, list[np.ndarray]]) -> dict[str, Any]:
        keys = list(columns)
        values = np.concatenate([v for key in keys for v in columns[key]])
        lengths = np.array([len(v) for key in keys for v in columns[key]], dtype=np.int64)
        return {
            "keys": keys,
            "values": torch.from_numpy(values.astype(np.int64)),
            "lengths": torch.from_numpy(lengths),
        }

    out = {"uih": kjt(uih), "candidates": kjt(cand)}
    item_action_weight = np.concatenate(cand["item_action_weight"])
    out["labels"] = torch.from_numpy((item_action_weight & LISTEN_PLUS_BIT).astype(np.float32))
    timestamps = out["uih"]["values"]
    if int(timestamps.min()) < 0 or int(timestamps.max()) >= MAX_TIMESTAMP:
        raise AssertionError("timestamps out of range")
    return out


def to_kjt(ref: Reference, plain: dict[str, Any]) -> Any:
    return ref.KeyedJaggedTensor(
        keys=list(plain["keys"]), values=plain["values"].clone(), lengths=plain["lengths"].clone()
    )


# ---- Running a case ----


class Capture:
    """Forward hook keeping the last output of a module as a detached float32 CPU tensor."""

    def __init__(self) -> None:
        self.value: torch.Tensor | None = None

    def __call__(self, _module: torch.nn.Module, _inputs: Any, output: torch.Tensor) -> None:
        self.value = output.detach().to(torch.float32).clone()

    def take(self) -> torch.Tensor:
        value, self.value = self.value, None
        if value is None:
            raise AssertionError("the prediction module did not run")
        return value


def run_case(ref: Reference, model: Any, case: Case, inputs: dict[str, Any]) -> dict[str, Any]:
    """Eval-mode and train-mode forwards, the train-mode loss and its gradients.

    The one model serves every case: its constructor only stores `bf16_training`, so the flag
    is set on the instance for the duration of a case.
    """
    model._bf16_training = case.bf16_training
    capture = Capture()
    handle = model._multitask_module._prediction_module.register_forward_hook(capture)
    scope: Callable[[], contextlib.AbstractContextManager[None]] = (
        cuda_autocast_on_cpu if case.bf16_training else contextlib.nullcontext
    )
    try:
        model.eval()
        with scope(), torch.no_grad():
            out = model(to_kjt(ref, inputs["uih"]), to_kjt(ref, inputs["candidates"]))
        eval_logits = capture.take()
        eval_predictions = out[3].detach().to(torch.float32).t().contiguous()
        if out[2]:
            raise AssertionError("eval mode returned losses")

        model.train()
        model.zero_grad(set_to_none=True)
        with scope():
            out = model(to_kjt(ref, inputs["uih"]), to_kjt(ref, inputs["candidates"]))
            loss = out[2]["listen_plus"]
            loss.backward()
        train_logits = capture.take()
        reference_labels = out[4].detach().to(torch.float32).reshape(-1)
    finally:
        handle.remove()
        model._bf16_training = False
    if not torch.equal(reference_labels, inputs["labels"]):
        raise AssertionError(f"labels differ: {reference_labels} vs {inputs['labels']}")

    grads: dict[str, torch.Tensor] = {}
    sparse_grads: dict[str, dict[str, torch.Tensor]] = {}
    no_grad: list[str] = []
    for name, param in model.named_parameters():
        grad = param.grad
        if grad is None:
            no_grad.append(name)
            grad = torch.zeros_like(param)
        grad = grad.detach().to(torch.float32).clone()
        if grad.dim() >= 2 and grad.shape[0] > SPARSE_GRAD_MIN_ROWS:
            rows = grad.reshape(grad.shape[0], -1).ne(0).any(dim=1).nonzero().reshape(-1)
            sparse_grads[name] = {
                "indices": rows.to(torch.int64),
                "values": grad[rows].contiguous(),
                "shape": list(grad.shape),
            }
        else:
            grads[name] = grad
    model.zero_grad(set_to_none=True)

    return {
        "format_version": FORMAT_VERSION,
        "name": case.name,
        "bf16_training": case.bf16_training,
        "autocast": "torch.autocast('cuda') run as a CPU bf16 autocast"
        if case.bf16_training
        else "none",
        "batch_size": len(case.history_lengths),
        "history_lengths": list(case.history_lengths),
        "input_seed": case.seed,
        "uih": inputs["uih"],
        "candidates": inputs["candidates"],
        "labels": inputs["labels"],
        "eval_logits": eval_logits,
        "eval_predictions": eval_predictions,
        "train_logits": train_logits,
        "train_loss": loss.detach().to(torch.float32).clone(),
        "grads": grads,
        "sparse_grads": sparse_grads,
        "params_without_grad": no_grad,
    }


def check_case(name: str, result: dict[str, Any]) -> list[str]:
    """Sanity checks on one case; returns human-readable notes (raises on a hard failure)."""
    notes = []
    for key in ("eval_logits", "train_logits", "eval_predictions", "train_loss"):
        if not bool(torch.isfinite(result[key]).all()):
            raise AssertionError(f"{name}: {key} is not finite")
    same = torch.equal(result["eval_logits"], result["train_logits"])
    diff = (result["eval_logits"] - result["train_logits"]).abs().max().item()
    if not result["bf16_training"] and diff > 1e-6:
        raise AssertionError(f"{name}: eval and train logits differ by {diff}")
    notes.append(f"eval==train logits: {'bitwise' if same else f'max diff {diff:.3g}'}")
    zero = [n for n, g in result["grads"].items() if not bool(g.ne(0).any())]
    zero += [n for n, g in result["sparse_grads"].items() if g["indices"].numel() == 0]
    notes.append(f"all-zero gradients: {zero or 'none'}")
    return notes


# ---- Saving ----


def plain_config(cfg: Any, tables: dict[str, Any], model: Any, seed: int) -> dict[str, Any]:
    """The config as plain dicts, lists, strings and numbers."""

    def plain(value: Any) -> Any:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if isinstance(value, dict):
            return {str(k): plain(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        if isinstance(value, enum.Enum):
            return value.name
        return value

    encoder = model._hstu_transducer._positional_encoder
    action_encoder = model._hstu_transducer._input_preprocessor._action_encoder
    return {
        "dlrm_hstu_config": plain(cfg),
        "tables": {
            name: {
                "num_embeddings": int(t.num_embeddings),
                "embedding_dim": int(t.embedding_dim),
                "feature_names": list(t.feature_names),
            }
            for name, t in tables.items()
        },
        "position_table_rows": int(encoder._position_embeddings_weight.shape[0]),
        "time_table_rows": int(encoder._timestamp_embeddings_weight.shape[0]),
        "action_embedding_dim": int(action_encoder._action_embedding_table.shape[1]),
        "is_inference": False,
        "hammer_kernel": "PYTORCH",
        "uih_keys": list(UIH_BATCH_KEYS),
        "candidate_keys": list(CANDIDATE_KEYS),
        "max_timestamp_exclusive": MAX_TIMESTAMP,
        "weight_seed": seed,
        "constant_init_noise_std": CONSTANT_INIT_NOISE_STD,
        "embedding_init": "uniform(-sqrt(1/rows), sqrt(1/rows)), seeded",
        "sparse_grad_min_rows": SPARSE_GRAD_MIN_ROWS,
    }


def reference_digests(root: Path) -> dict[str, str]:
    """sha256 of every file of the reference package that this process imported."""
    digests = {}
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if not file:
            continue
        path = Path(file).resolve()
        if path.is_relative_to(root / "generative_recommenders"):
            digests[path.relative_to(root).as_posix()] = hashlib.sha256(
                path.read_bytes()
            ).hexdigest()
    return dict(sorted(digests.items()))


def save_atomic(
    obj: dict[str, Any], path: Path, dump: Callable[[Any, Any], None] = torch.save
) -> None:
    """`dump(obj, file)` to a temporary file in the same directory (opened for binary
    writing), then rename it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            dump(obj, f)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give it a normal file's mode
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    root = check_reference(args.reference)
    torch.set_num_threads(1)  # the same reduction order on every machine
    torch.use_deterministic_algorithms(True)
    ref = import_reference(root)
    forbid_triton()

    cfg = build_config(ref, SHAPE)
    tables = build_tables(ref, SHAPE)
    check_wiring(cfg, tables)
    model = build_model(ref, cfg, tables, args.seed)
    perturbed = perturb_constants(model, args.seed)

    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    results = {case.name: run_case(ref, model, case, make_inputs(case)) for case in CASES}
    for k, v in model.state_dict().items():  # nothing updates the weights; be sure
        if not torch.equal(v, state[k]):
            raise AssertionError(f"{k} changed while running the cases")
    for name, result in results.items():  # check everything before writing anything
        for note in check_case(name, result):
            print(f"{name}: {note}", file=sys.stderr)
        print(f"{name}: eval logits {result['eval_logits'].reshape(-1).tolist()}", file=sys.stderr)

    parameter_names = [n for n, _ in model.named_parameters()]
    weights = {
        "format_version": FORMAT_VERSION,
        "state_dict": state,
        "parameter_names": parameter_names,
        # state_dict() holds the parameters and the persistent buffers only
        "buffer_names": [k for k in state if k not in set(parameter_names)],
        "perturbed_parameters": perturbed,
        "config": plain_config(cfg, tables, model, args.seed),
        "reference": {
            "commit": args.reference_commit,
            "model_file": MARKER,
            "model_class": "generative_recommenders.modules.dlrm_hstu.DlrmHSTU",
            "sha256": reference_digests(root),
        },
        "cases": [case.name for case in CASES],
    }
    save_atomic(weights, args.out / "weights.pt")
    for name, result in results.items():
        save_atomic(result, args.out / f"case_{name}.pt")
    print(f"wrote weights.pt and {len(results)} cases to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
