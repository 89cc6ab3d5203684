"""The reference's convergence logs: they name the benchmark `hstu` and record no run_stop.

`check` says in one line which benchmark such a log names and which the ruleset knows (exit 2,
no verdict); `score --reference` reads a folder of them as what they are, the convergence runs
an RCP is made of: per global batch, the samples to the target of each run, their olympic mean
as mlperf_logging's RCP checker computes it, and whether they are the installed RCP record.
The logs here are written by the tests in the reference's shape; the reference's own logs are
read only where ``HSTU_REFERENCE_CHECKOUT`` names its ``recommendation_v4`` directory.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from mlperf_compliance import MLPerfLogger, eval_interval_samples, score_results
from mlperf_compliance.checker import check_log
from mlperf_compliance.cli import main
from mlperf_compliance.olympic import package_file
from mlperf_compliance.reference import score_reference

TRAIN_SAMPLES = 2_290_835_423


def write_convergence_log(
    path: Path, *, gbs: int, converge_eval: int | None, lr: float = 1e-6, evals: int = 0
) -> Path:
    """A log in the shape of the reference's convergence runs: benchmark `hstu`, an eval every
    0.001 of the data from the start, AUC 0.75 first reached at eval ``converge_eval`` (never
    with ``None``), a few evals after it, and no run_stop."""
    interval = eval_interval_samples(gbs)
    count = evals or (converge_eval or 6) + 2
    path.parent.mkdir(parents=True, exist_ok=True)
    with MLPerfLogger(path, benchmark="hstu") as log:
        log.cache_clear(True)
        log.init_start()
        log.submission_info(org="Org", platform="8xGPU", division="closed")
        log.hyperparameters(
            {
                "global_batch_size": gbs,
                "opt_base_learning_rate": lr,
                "train_samples": TRAIN_SAMPLES,
                "eval_samples": 2_058_204,
            }
        )
        log.init_stop()
        log.run_start()
        for i in range(1, count + 1):
            at = i * interval
            log.block_start((i - 1) * interval)
            log.block_stop(at)
            log.eval_start(at)
            log.eval_stop(at)
            reached = converge_eval is not None and i >= converge_eval
            log.eval_accuracy(0.7504 if reached else 0.70, at)
    return path


def installed_rcp(gbs: int) -> dict[str, object]:
    folder = package_file("mlperf_logging.rcp_checker", "training_6.1.0")
    assert folder is not None
    records = json.loads((folder / "rcps_dlrmv4.json").read_text())
    (record,) = [r for r in records.values() if r["BS"] == gbs]
    return record


def olympic(values: Sequence[float]) -> float:
    kept = sorted(values)[1:-1]
    return sum(kept) / len(kept)


def test_check_names_the_benchmark_the_log_names_and_those_the_ruleset_knows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = write_convergence_log(tmp_path / "seed1.log", gbs=8192, converge_eval=3)
    with pytest.raises(ValueError, match=r"names the benchmark 'hstu'"):
        check_log(log)
    assert main(["check", str(log)]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert line.startswith(f"mlperf-compliance check: error: {log}:3: the log names the ")
    assert "the training 6.1.0 ruleset knows " in line and "dlrmv4" in line
    assert "crashed" not in line and "Traceback" not in captured.err
    assert main(["check", str(log), "--format", "json"]) == 2
    assert "names the benchmark 'hstu'" in json.loads(capsys.readouterr().out)["error"]


def test_score_reference_reads_convergence_runs_per_global_batch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    evals = {8192: [30, 29, 31, 33, 28], 16384: [20, 21, 19, 22]}
    for gbs, at in evals.items():
        for i, e in enumerate(at):
            write_convergence_log(
                tmp_path / f"gbs_{gbs}" / f"seed{i}.log", gbs=gbs, converge_eval=e
            )
    report = score_reference(tmp_path)
    assert [g.global_batch_size for g in report.groups] == [8192, 16384]
    for group in report.groups:
        samples = [
            e * eval_interval_samples(group.global_batch_size)
            for e in evals[group.global_batch_size]
        ]
        assert sorted(r.samples_to_target for r in group.runs) == sorted(samples)
        assert group.rcp_mean == pytest.approx(olympic(samples), rel=1e-12)
        epochs = [s / TRAIN_SAMPLES for s in samples]
        assert group.epochs_mean == pytest.approx(olympic(epochs), rel=1e-12)
        installed = installed_rcp(group.global_batch_size)
        assert group.installed_name == f"dlrmv4_ref_{group.global_batch_size}"
        assert group.installed_mean == pytest.approx(
            olympic(installed["Epochs to converge"]),
            rel=1e-12,  # type: ignore[arg-type]
        )
        assert group.verdict == "differs"
    assert report.logged_benchmarks == ["hstu"]
    assert not report.valid
    assert main(["score", str(tmp_path), "--reference"]) == 1
    out = capsys.readouterr().out
    assert "the logs name it 'hstu'" in out
    assert "8,192" in out and "16,384" in out


def test_the_closed_least_mean_is_the_pruned_interpolated_record(tmp_path: Path) -> None:
    """Pruning drops the installed 16,384 record (slower than the line from 8,192 to 32,768),
    so the RCP check bounds a submission there by the interpolated record, not by its own."""
    for gbs in (8192, 16384):
        for i, e in enumerate([30, 29, 31]):
            write_convergence_log(tmp_path / f"gbs_{gbs}" / f"s{i}.log", gbs=gbs, converge_eval=e)
    by_batch = {g.global_batch_size: g for g in score_reference(tmp_path).groups}
    at_8192, at_16384 = by_batch[8192], by_batch[16384]
    assert at_8192.closed_rcp == "its pruned record"
    assert at_8192.closed_min_mean == at_8192.installed_min_acceptable_mean
    assert at_16384.closed_rcp == "interpolated from 8192 and 32768"
    assert at_16384.closed_min_mean == pytest.approx(80_117_345, abs=1)
    assert at_16384.installed_min_acceptable_mean == pytest.approx(83_074_608, abs=1)


def test_score_reference_matches_the_installed_rcp(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Runs whose samples to the target are the installed RCP record's are that record."""
    samples = installed_rcp(8192)["Epochs to converge"]
    interval = eval_interval_samples(8192)
    for i, s in enumerate(samples):  # type: ignore[arg-type]
        assert s % interval == 0
        write_convergence_log(tmp_path / f"seed{i}.log", gbs=8192, converge_eval=s // interval)
    write_convergence_log(tmp_path / "never.log", gbs=8192, converge_eval=None, evals=4)
    report = score_reference(tmp_path)
    (group,) = report.groups
    assert group.verdict == "matches" and group.rcp_mean == group.installed_mean
    assert [str(p) for p in report.problems] == [
        f"{tmp_path / 'never.log'}: no eval_accuracy reached 0.75 (4 evals, best 0.7)"
    ]
    (tmp_path / "never.log").unlink()
    assert score_reference(tmp_path).valid
    assert main(["score", str(tmp_path), "--reference", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["valid"] is True and data["groups"][0]["verdict"] == "matches"


def test_score_without_reference_says_what_the_logs_look_like(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for i in range(3):
        write_convergence_log(tmp_path / f"seed{i}.log", gbs=8192, converge_eval=3)
    report = score_results(tmp_path)
    assert not report.valid
    assert any("score --reference" in p for p in report.problems), report.problems
    assert all("crashed" not in p for r in report.runs for p in r.problems)
    assert main(["score", str(tmp_path)]) == 1
    assert "score --reference" in capsys.readouterr().out


def test_score_reference_errors_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["score", str(tmp_path / "nothing"), "--reference"]) == 2
    assert len(capsys.readouterr().err.splitlines()) == 1
    write_convergence_log(tmp_path / "a.log", gbs=8192, converge_eval=3)
    assert main(["score", str(tmp_path), "--reference", "--benchmark", "flux1"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "flux1" in err


REFERENCE = os.environ.get("HSTU_REFERENCE_CHECKOUT")


@pytest.mark.skipif(
    not REFERENCE or not (Path(REFERENCE) / "rcp_logs").is_dir(),
    reason="HSTU_REFERENCE_CHECKOUT names no recommendation_v4 directory with rcp_logs/ "
    "(the reference's 60 convergence logs)",
)
def test_the_reference_convergence_logs_are_the_installed_rcps() -> None:
    report = score_reference(Path(str(REFERENCE)) / "rcp_logs")
    assert [(g.global_batch_size, len(g.runs)) for g in report.groups] == [
        (8192, 20),
        (16384, 20),
        (32768, 20),
    ]
    assert [g.verdict for g in report.groups] == ["matches"] * 3
    assert report.logged_benchmarks == ["hstu"] and report.valid
