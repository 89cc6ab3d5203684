"""benchmarks/bench_gpu.py: it runs (tiny shapes, Triton's interpreter) and reports every
family and kernel, so that the GPU benchmark cannot rot on a CPU-only CI."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_gpu.py"
WITHOUT_TORCHREC = Path(__file__).with_name("without_torchrec.py")


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_gpu", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


bench = load_bench()


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the tiny run is the CPU's (interpreter)")
def test_tiny_run_times_every_family_and_kernel(tmp_path):
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--tiny", "--json", str(tmp_path / "rows.json")],
        capture_output=True,
        text=True,
        timeout=300,
        env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"},  # --tiny sets it
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "triton 3." in result.stdout and "(interpreter)" in result.stdout
    rows = json.loads((tmp_path / "rows.json").read_text())["rows"]
    timed = {(r["family"], r["kernel"]) for r in rows if r["ms"] is not None and r["ms"] > 0}
    expected = {(f, k) for f, kernels in bench.FAMILY_KERNELS.items() for k in kernels}
    expected -= {(f, "reference") for f in bench.ATTENTION_FAMILIES}  # no --reference given
    assert timed == expected  # on the CPU under the interpreter every kernel runs
    for row in rows:
        if row["kernel"] == "reference":
            assert row["note"] == "not run: no --reference checkout given" and not row["failed"]
        if row["family"] in bench.ATTENTION_FAMILIES and row["ms"]:
            flops = bench.attention_flops(row["family"], 2, bench.tiny_setting())
            assert row["tflops"] == pytest.approx(flops / (row["ms"] / 1000) / 1e12)
        else:
            assert row["tflops"] is None
    assert {r["family"] for r in rows} == set(bench.FAMILIES)
    printed = result.stdout.splitlines()
    for family, kernel in expected:
        assert any(line.startswith(f"{family:<22}{kernel:<10}B=2 ") for line in printed), (
            family,
            kernel,
        )
    for row in rows:
        if row["ms"] is None:
            continue
        if row["kernel"] == "pytorch":
            assert row["speedup"] == 1.0
        else:
            assert row["speedup"] == pytest.approx(
                next(
                    r["ms"]
                    for r in rows
                    if (r["family"], r["shape"]) == (row["family"], row["shape"])
                    and r["kernel"] == "pytorch"
                )
                / row["ms"]
            )
        assert row["samples_per_s"] == pytest.approx(row["batch"] / (row["ms"] / 1000))
        # On the CPU: no GPU memory, and no shape of the published figure at tiny sizes.
        assert row["peak_mib_per_sample"] is None and row["vs_published"] is None
    dense = [r for r in rows if r["family"] == "dense-step"]
    assert [(r["shape"], r["kernel"]) for r in dense] == [
        ("B=2 N=12", "pytorch"), ("B=2 N=12", "triton"),
        ("B=2 N=16", "pytorch"), ("B=2 N=16", "triton"),
    ]  # fmt: skip
    for row in dense:
        assert row["note"].startswith("lookups on plain torch tables (torch.nn.Embedding, ")
        assert "no TorchRec sharding, no fused sparse optimizer" in row["note"]


def test_a_batch_that_runs_out_of_memory_is_skipped_with_a_note(monkeypatch):
    def runners(family, batch, setting, device, reference=None):
        def run(kernel):
            if kernel == "triton":
                raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 64 GiB")
            return lambda: None

        return run

    monkeypatch.setattr(bench, "make_runners", runners)
    monkeypatch.setattr(bench, "unavailable", lambda *args: None)
    rows = bench.bench_family("attention", 1024, bench.tiny_setting(), torch.device("cpu"), 0, 1)
    by_kernel = {r.kernel: r for r in rows}
    assert by_kernel["triton"].ms is None and by_kernel["triton"].note == "skipped: out of memory"
    assert not by_kernel["triton"].failed
    assert by_kernel["pytorch"].ms is not None and by_kernel["native"].speedup is not None


def test_inputs_that_do_not_fit_skip_the_batch_size(monkeypatch):
    def runners(family, batch, setting, device, reference=None):
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 TB")

    monkeypatch.setattr(bench, "make_runners", runners)
    rows = bench.bench_family("norms", 1024, bench.tiny_setting(), torch.device("cpu"), 0, 1)
    assert [r.kernel for r in rows] == ["pytorch", "triton"]
    assert all(r.note == "skipped: out of memory for the inputs" and not r.failed for r in rows)


def test_a_kernel_that_fails_otherwise_is_a_failure(monkeypatch):
    def runners(family, batch, setting, device, reference=None):
        def run(kernel):
            if kernel == "triton":
                raise ValueError("addmm: mat2.shape[0] = 4 must equal mat1.shape[1] = 3")
            return lambda: None

        return run

    monkeypatch.setattr(bench, "make_runners", runners)
    monkeypatch.setattr(bench, "unavailable", lambda *args: None)
    rows = bench.bench_family("addmm", 2, bench.tiny_setting(), torch.device("cpu"), 0, 1)
    assert rows[-1].failed and rows[-1].note.startswith("FAILED: ValueError: addmm: mat2")


def test_kernels_that_cannot_run_on_the_device_are_named():
    assert "CPU tensors only" in bench.unavailable("attention", "native", "cuda")
    assert bench.unavailable("model-step", "native", "cuda") is not None
    assert bench.unavailable("layer-projections", "pytorch", "cuda") is None
    assert bench.unavailable("model-step", "triton", "cuda") is None


def test_attention_flops_count_the_causal_pairs_three_times_with_the_backward():
    setting = bench.tiny_setting()  # 8 contextual + 7 history + 1 candidate, 2 heads of 32/32
    m = setting.cfg.model
    assert (m.contextual_seq_len, m.history_length, m.num_candidates) == (8, 7, 1)
    pairs = 15 * 16 // 2 + 1 * 16  # causal over the 15, the candidate sees them and itself
    forward = 3 * pairs * 2 * 2 * (32 + 32)
    assert bench.attention_flops("attention-fwd", 3, setting) == forward
    assert bench.attention_flops("attention", 3, setting) == 3 * forward


def test_rows_give_the_reference_kernels_time_over_theirs(monkeypatch):
    times = {"pytorch": 8.0, "native": 1.0, "triton": 2.0, "reference": 4.0}

    def runners(family, batch, setting, device, reference):
        def run(kernel):
            return kernel  # time_ms below reads the kernel's time from it

        run.agreement = lambda: ("agrees with ours (triton): out 1.0e-03", False)
        return run

    monkeypatch.setattr(bench, "make_runners", runners)
    monkeypatch.setattr(
        bench, "time_ms", lambda kernel, device, warmup, iters: (times[kernel], None)
    )
    monkeypatch.setattr(bench, "unavailable", lambda *args: None)
    rows = bench.bench_family("attention", 2, bench.tiny_setting(), torch.device("cpu"), 0, 1)
    by_kernel = {r.kernel: r for r in rows}
    assert {k: r.vs_reference for k, r in by_kernel.items()} == {
        "pytorch": 0.5, "native": 4.0, "triton": 2.0, "reference": 1.0
    }  # fmt: skip
    assert by_kernel["reference"].note.startswith("agrees with ours") and not any(
        r.failed for r in rows
    )
    assert by_kernel["reference"].speedup == 2.0


@pytest.mark.parametrize("family", bench.STEP_FAMILIES)
def test_step_rows_at_the_published_shape_carry_the_figure_and_on_a_gpu_the_ratio(
    monkeypatch, family
):
    monkeypatch.setattr(bench, "make_runners", lambda *args: lambda kernel: None)
    monkeypatch.setattr(bench, "unavailable", lambda *args: None)
    ms_per_step = 32 / 2787.0 * 1000 / 2  # twice the 8 GPUs' published samples/s
    monkeypatch.setattr(bench, "time_ms", lambda *args: (ms_per_step, 64 * 2**20))
    monkeypatch.setattr(bench, "gpu_busy_fraction", lambda *args: 0.75)
    setting = bench.yambda_5b_setting(1000)
    at_2048 = setting.with_tokens(2048)
    gpu, cpu = torch.device("cuda"), torch.device("cpu")
    for row in bench.bench_family(family, 32, at_2048, gpu, 0, 1):
        # Per GPU: the reference's 2,787 samples/s were 8 MI350X's.
        assert row.published_samples_per_s == 348.0
        assert row.vs_published == pytest.approx(2 * 2787 / 348)
        assert row.peak_mib_per_sample == 2.0  # 64 MiB over 32 samples
        assert row.gpu_busy == 0.75 and row.note.startswith("GPU busy 75.0% of wall")
    for row in bench.bench_family(family, 32, at_2048, cpu, 0, 1):
        assert row.published_samples_per_s == 348.0 and row.vs_published is None
        assert row.gpu_busy is None
    for row in bench.bench_family(family, 1024, at_2048, cpu, 0, 1):
        assert row.published_samples_per_s == 1778.0
    for batch, each in ((32, setting.with_tokens(4096)), (64, at_2048)):
        for row in bench.bench_family(family, batch, each, gpu, 0, 1):
            assert row.published_samples_per_s is None and row.vs_published is None


def test_busy_share_is_the_union_of_the_kernels_over_their_span():
    assert bench.busy_share([]) == 0.0
    assert bench.busy_share([(0.0, 10.0)]) == 1.0
    # Overlapping kernels count once; the gap 12..16 is idle: 16 busy of 20.
    assert bench.busy_share([(0.0, 10.0), (2.0, 12.0), (16.0, 18.0), (17.0, 20.0)]) == 0.8


def test_dense_step_settings_cut_the_tables_and_set_the_tokens():
    setting = bench.yambda_5b_setting(1_000_000).with_tokens(4096).with_rows(10_000)
    m = setting.cfg.model
    assert setting.tokens == 4096 == m.max_seq_len
    assert (m.contextual_seq_len, m.history_length, m.num_candidates) == (8, 4087, 1)
    assert set(setting.vocab.values()) == {10_000}
    assert set(m.contextual_tables().values()) == {10_000}
    note = bench.family_note("dense-step", setting)
    assert note.startswith("lookups on plain torch tables (torch.nn.Embedding, at most 10,000 ")
    assert bench.family_note("model-step", setting) == ""


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the tiny run is the CPU's (interpreter)")
def test_dense_step_runs_where_torchrec_and_fbgemm_cannot_be_imported(tmp_path):
    result = subprocess.run(
        [sys.executable, str(WITHOUT_TORCHREC), str(SCRIPT), "--tiny", "--families",
         "dense-step", "--dense-step-lengths", "16", "--json", str(tmp_path / "rows.json"),
         "--profile-steps"],
        capture_output=True, text=True, timeout=300,
        env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    rows = json.loads((tmp_path / "rows.json").read_text())["rows"]
    assert [(r["family"], r["kernel"], r["shape"]) for r in rows] == [
        ("dense-step", "pytorch", "B=2 N=16"), ("dense-step", "triton", "B=2 N=16")
    ]  # fmt: skip
    assert all(r["ms"] > 0 and not r["failed"] for r in rows)
    for kernel in ("pytorch", "triton"):  # where the step's time goes, after its row
        heading = f"profile of one more run, dense-step {kernel} B=2 N=16:"
        assert heading in result.stdout
        assert "Self CPU" in result.stdout.split(heading)[1]


def test_a_reference_that_differs_fails_its_row(monkeypatch):
    def runners(family, batch, setting, device, reference):
        run = lambda kernel: lambda: None  # noqa: E731
        run.agreement = lambda: ("FAILED: differs from ours (triton): out 1.0e+00", True)
        return run

    monkeypatch.setattr(bench, "make_runners", runners)
    monkeypatch.setattr(bench, "unavailable", lambda *args: None)
    rows = bench.bench_family("attention", 2, bench.tiny_setting(), torch.device("cpu"), 0, 1)
    assert [r.kernel for r in rows if r.failed] == ["reference"]
    assert rows[-1].ms is not None  # timed all the same, for the record


def test_agreement_compares_the_output_and_the_input_gradients():
    gen = torch.Generator().manual_seed(0)
    inputs = [torch.randn(6, 2, 4, generator=gen).requires_grad_() for _ in range(3)]
    grad = torch.randn(6, 2, 4, generator=gen)

    def attend(shift):
        def run(kernel):
            q, k, v = inputs
            out = (q * k).sum(-1, keepdim=True) * v
            return out + shift * q if kernel == "reference" else out

        return run

    note, failed = bench.agreement(attend(0.0), inputs, grad, backward=True)
    assert not failed and note == "agrees with ours (triton): out 0.0e+00, dq 0.0e+00, " + (
        "dk 0.0e+00, dv 0.0e+00"
    )
    note, failed = bench.agreement(attend(0.5), inputs, grad, backward=True)
    assert failed and note.startswith("FAILED: differs from ours (triton): out ")
    assert "dk 0.0e+00, dv 0.0e+00" in note  # the shift moves the output and dq only
    note, failed = bench.agreement(attend(0.0), inputs, grad, backward=False)
    assert not failed and note.endswith("out 0.0e+00")
    assert all(x.grad is None for x in inputs)  # left as it found them


def test_the_largest_batch_search_doubles_until_every_kernel_runs_out_of_memory(monkeypatch):
    fits = {"pytorch": 8, "triton": 32}  # the largest batch each kernel fits

    def bench_family(family, batch, setting, device, warmup, iters, reference, kernels):
        return [
            bench.Row(family, k, batch, "", *((1.0,) if batch <= fits[k] else ())) for k in kernels
        ]

    monkeypatch.setattr(bench, "bench_family", bench_family)
    monkeypatch.setitem(bench.FAMILY_KERNELS, "norms", ("pytorch", "triton"))
    rows = bench_family("norms", 2, None, None, 0, 1, None, ["pytorch", "triton"])
    added = []
    largest = bench.largest_batch("norms", [1, 2], None, None, 0, 1, None, rows, added.extend, 1024)
    assert largest == {"pytorch": 8, "triton": 32}
    assert [(r.batch, r.kernel) for r in added] == [
        (4, "pytorch"), (4, "triton"), (8, "pytorch"), (8, "triton"), (16, "pytorch"),
        (16, "triton"), (32, "triton"), (64, "triton"),
    ]  # fmt: skip
    assert bench.largest_batch("norms", [1, 2], None, None, 0, 1, None, rows, added.extend, 8) == {
        "pytorch": 8, "triton": 8
    }  # fmt: skip


REFERENCE = os.environ.get("HSTU_REFERENCE_CHECKOUT")


@pytest.mark.slow
@pytest.mark.skipif(not REFERENCE, reason="HSTU_REFERENCE_CHECKOUT names no reference checkout")
@pytest.mark.skipif(torch.cuda.is_available(), reason="the tiny run is the CPU's (interpreter)")
def test_tiny_run_times_the_reference_attention_beside_ours(tmp_path):
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--tiny", "--families", *bench.ATTENTION_FAMILIES,
         "--reference", REFERENCE, "--largest-batch", "attention",
         "--json", str(tmp_path / "rows.json")],
        capture_output=True, text=True, timeout=300,
        env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "; reference: generative_recommenders.ops.triton.triton_hstu_attention." in (
        result.stdout
    )
    assert "attention: largest batch not searched on the CPU" in result.stdout
    record = json.loads((tmp_path / "rows.json").read_text())
    assert record["largest_batch"] == {}
    rows = {(r["family"], r["kernel"]): r for r in record["rows"]}
    for family in bench.ATTENTION_FAMILIES:
        ref = rows[family, "reference"]
        assert ref["ms"] > 0 and ref["vs_reference"] == 1.0 and not ref["failed"]
        # The interpreter does not run the reference's kernels as a GPU does: the check runs
        # and reports, but only a GPU run can fail on it.
        assert ref["note"].startswith("agrees with ours (triton): out ") or (
            ref["note"].startswith("differs from ours (triton): out ")
            and ref["note"].endswith(bench.INTERPRETED_DIFFERENCE)
        )
        assert rows[family, "triton"]["vs_reference"] == pytest.approx(
            ref["ms"] / rows[family, "triton"]["ms"]
        )
        assert ref["tflops"] > 0


def test_the_references_deprecation_warnings_are_silenced_and_no_others(tmp_path):
    message = "Logical operators 'and' and 'or' are deprecated for non-scalar tensors"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bench.quiet_reference_deprecations(tmp_path)
        for filename in (tmp_path / "ops" / "kernel.py", Path("/elsewhere/kernel.py")):
            # As Triton's code generator gives it: attributed to the kernel's source file.
            warnings.warn_explicit(message, UserWarning, str(filename), 7)
        warnings.warn_explicit("another warning", UserWarning, str(tmp_path / "k.py"), 7)
    assert [(w.filename, str(w.message)) for w in caught] == [
        ("/elsewhere/kernel.py", message), (str(tmp_path / "k.py"), "another warning")
    ]  # fmt: skip


def test_a_checkout_without_the_reference_attention_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="recommendation_v4 directory"):
        bench.load_reference(tmp_path)


RECORD_DENSE_STEP = """
import json, sys
import torch
from hstu_ops.gpu_compile import GPU_TARGETS, compile_problems, record_launches
sys.path.insert(0, sys.argv[1])
import bench_gpu
target = GPU_TARGETS[sys.argv[2]]
setting = bench_gpu.yambda_5b_setting(1000)
with record_launches(target) as recorder:
    for tokens in setting.dense_step_lengths:
        run = bench_gpu.dense_step_runners(2, setting.with_tokens(tokens), torch.device("cpu"))
        run("triton")()
print(json.dumps({"kernels": sorted(recorder.kernels()),
                  "problems": compile_problems(recorder, target)}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm90", "gfx942"])
def test_the_dense_steps_triton_launches_compile_for_the_gpus(arch):
    """What the GPU check's dense-step times first (bf16 autocast, forward, backward, Adam) at
    the yambda-5b shape and both lengths, its Triton launches recorded on CPU tensors as if on
    an H100 or an MI300X and compiled for that chip: the first GPU run should not be the first
    compilation (hstu_ops.gpu_compile)."""
    pytest.importorskip("triton")
    vendor = "nvidia" if arch.startswith("sm") else "amd"
    pytest.importorskip(f"triton.backends.{vendor}.compiler")
    result = subprocess.run(
        [sys.executable, "-c", RECORD_DENSE_STEP, str(SCRIPT.parent), arch],
        capture_output=True,
        text=True,
        timeout=600,
        # The fused addmm instead of cuBLAS: a GPU's cuBLAS call would run here on the CPU at
        # the yambda-5b shape (minutes of matmuls), where a recorded Triton launch costs nothing.
        env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        | {"HSTU_OPS_ADDMM": "fused"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    found = json.loads(result.stdout.splitlines()[-1])
    assert {"_hstu_attn_fwd_kernel", "_hstu_attn_bwd_dq_kernel"} <= set(found["kernels"])
    assert not found["problems"], "\n".join(found["problems"])
