"""tools/gpu/check.sh: the GPU check, run on the CPU as CI runs it (--cpu-smoke)."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECK = ROOT / "tools" / "gpu" / "check.sh"
FAMILIES = (
    "jagged-1d",
    "jagged-2d",
    "attention",
    "layer-projections",
    "norms",
    "positional-embeddings",
    "addmm",
)


def check(*args, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(CHECK), *map(str, args)],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable, "HOME": str(Path.home())},
        timeout=timeout,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [([], "OUT_DIR is missing"), (["--cpu-smoke"], "OUT_DIR is missing"),
     (["{tmp}/a-file"], "OUT_DIR {tmp}/a-file: not a directory"),
     (["{tmp}/out", "--reference", "{tmp}"], "--reference {tmp}: no "
      "generative_recommenders/ops/triton/triton_hstu_attention.py (the recommendation_v4 "
      "directory of the MLPerf training repository)"),
     (["{tmp}/out", "--stages", "tests", "bench"], "--stages bench: no such stage (the "
      "stages: environment, install, native-build, correctness, gpu-tests, benchmarks, tests)")],
)  # fmt: skip
def test_bad_arguments_are_one_line_with_status_2(args, message, tmp_path):
    (tmp_path / "a-file").write_text("x")
    done = check(*(a.format(tmp=tmp_path) for a in args))
    assert done.returncode == 2, done
    assert done.stderr == f"check.sh: error: {message.format(tmp=tmp_path)} (see check.sh --help)\n"
    assert done.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


@pytest.mark.slow
def test_cpu_smoke_writes_one_json_and_one_table(tmp_path):
    out = tmp_path / "out"
    done = check(out, "--cpu-smoke", timeout=420)  # the smoke's stage timeouts: 360 s in all
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert sorted(p.name for p in out.iterdir()) == [
        "gpu-check.json",
        "gpu-check.log",
        "gpu-check.md",
    ]
    result = json.loads((out / "gpu-check.json").read_text())
    assert result["mode"] == "cpu-smoke" and result["finished"]
    stages = {s["name"]: s["status"] for s in result["stages"]}
    assert stages == {
        "environment": "passed",
        "install": "skipped",
        "native-build": "passed",
        "correctness": "passed",
        "gpu-tests": "passed",
        "benchmarks": "passed",
        "tests": "passed",
    }
    families = result["correctness"]["families"]
    assert set(families) == set(FAMILIES)
    for family, kernels in families.items():
        for kernel, per_dtype in kernels.items():
            for dtype in ("float32", "bfloat16"):
                entry = per_dtype[dtype]
                assert entry["passed"] and entry["error"] <= entry["tolerance"], (family, kernel)
    # Triton in the interpreter everywhere but jagged-1d; the native CPU ops where they exist.
    assert "triton" in families["attention"] and "native" in families["attention"]
    assert set(families["jagged-1d"]) == {"native"}
    assert result["tests"]["gpu-tests"]["skipped"] > 0
    bench_rows = result["benchmarks"]["rows"]
    bench_families = {r["family"] for r in bench_rows}
    assert set(FAMILIES) | {"attention-fwd", "dense-step"} <= bench_families
    # The training step on plain tables first, then its model's MLPs compiled (aot_eager on
    # the CPU) last.
    dense = [r for r in bench_rows if r["family"] == "dense-step"]
    eager = [r for r in dense if not r["shape"].endswith("compiled")]
    assert bench_rows[: len(eager)] == eager and bench_rows[-1] == dense[-1]
    assert {(r["kernel"], r["shape"]) for r in dense} == {
        ("pytorch", "B=2 N=16"), ("triton", "B=2 N=16"), ("triton", "B=2 N=16 compiled")
    }  # fmt: skip
    for row in dense:
        assert row["ms"] > 0 and "plain torch tables" in row["note"], row
        assert row["gpu_busy"] is None  # no device trace on the CPU
    assert result["dense_step"] == {}  # its rows are at 2,048 tokens: none in the smoke
    assert re.fullmatch(r"\d{4}-\d\d-\d\d-cpu-[0-9a-f]+\.json", result["docs_name"])
    assert any("no --reference CHECKOUT given" in s for s in result["skipped"])
    table = (out / "gpu-check.md").read_text()
    assert "| correctness | passed |" in table
    assert "| TFLOP/s | vs reference | peak MiB/sample | vs published | note |" in table
    assert "| dense-step | triton | B=2 N=16 | " in table
    for family in FAMILIES:
        assert f"| {family} | " in table
    assert "Unfinished" not in table


def load_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "tools" / "gpu" / "check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_table_names_the_published_figure_beside_the_ratio():
    row = {"published_samples_per_s": 2787.0, "vs_published": 0.5}
    check_module = load_check()
    assert check_module.vs_published(row) == "0.50x of 2,787"
    assert check_module.vs_published({**row, "vs_published": None}) == "- (published 2,787)"
    assert check_module.vs_published({"published_samples_per_s": None}) == "-"


def fake_check(check_module, tmp_path, replies: dict[str, tuple]):
    """A --cpu-smoke Check whose commands answer from ``replies`` (stage -> replies in order)."""
    check = check_module.Check(tmp_path, smoke=True, budget=60)
    queue = {stage: list(answers) for stage, answers in replies.items()}
    check.command = lambda stage, argv, timeout, env=None: queue[stage].pop(0)
    return check


def test_the_smoke_fails_on_an_interpreter_that_numpy_breaks(tmp_path):
    check_module = load_check()
    problem = "Triton 3.6.0's interpreter does not run with numpy 2.5.2 (...)"
    info = {"torch": "2.11.0", "triton": "3.6.0", "numpy": "2.5.2", "interpreter_problem": problem}
    check = fake_check(check_module, tmp_path, {"environment": [(0, "ENV " + json.dumps(info))]})
    assert check.environment(30) == ("failed", problem)
    info["interpreter_problem"] = None
    check = fake_check(check_module, tmp_path, {"environment": [(0, "ENV " + json.dumps(info))]})
    assert check.environment(30)[0] == "passed"


def test_a_native_op_whose_error_does_not_arrive_whole_fails_the_build_stage(tmp_path, monkeypatch):
    check_module = load_check()
    built = 'NATIVE {"cpu": true, "cuda": false, "hip": false, "error": null}'
    head = "NATIVE-SO /x/_C.so\nNATIVE-RUNTIME /lib/libstdc++.so.6.0.33\n"
    whole = f"{head}NATIVE-ERROR {check_module.NATIVE_ERROR_MESSAGE}"
    for probe, expected in (
        ((0, whole), "passed"),
        ((-11, head + "Fatal Python error: Segmentation fault"), "killed by signal 11"),
        ((0, head + "NATIVE-ERROR complete_cumsum: lengths["), "damaged message"),
        ((1, "RuntimeError: something else"), "exit status 1"),
    ):
        check = fake_check(check_module, tmp_path, {"native-build": [(0, built), probe]})
        check.result["environment"] = {"c++": "c++ (GCC) 13.3.0", "pybind11": "3.0.1"}
        status, detail = check.native_build(30)
        # The libraries are recorded whatever the outcome, for the next machine to compare.
        record = check.result["native_build"]["runtime_libraries"]
        assert ("ldd _C.so" if "NATIVE-SO" in probe[1] else "not found") in record
        if expected == "passed":
            assert status == "passed", detail
        else:
            assert status == "failed" and expected in detail and "GCC) 13.3.0" in detail
            where = "ldd _C.so" if "NATIVE-SO" in probe[1] else "the extension was not found"
            assert where in detail, detail
    # A module without libstdc++.so.6 among its libraries fails with the cause named, even when
    # its errors still arrive whole.
    monkeypatch.setattr(check_module, "needed_libraries", lambda path: ["libc10.so", "libc.so.6"])
    check = fake_check(check_module, tmp_path, {"native-build": [(0, built), (0, whole)]})
    check.result["environment"] = {"c++": "c++ (GCC) 13.3.0"}
    status, detail = check.native_build(30)
    assert status == "failed", detail
    assert "cause: the extension carries its own static C++ runtime" in detail, detail
    assert check.result["native_build"]["torch_cxx_runtime"] == "/lib/libstdc++.so.6.0.33"


def test_the_cause_is_read_from_the_extension_s_libraries():
    cause = load_check().runtime_cause
    torch_runtime = "/usr/lib/libstdc++.so.6.0.33"
    good = ["libgcc_s.so.1", "libc10.so", "libstdc++.so.6", "libc.so.6"]
    assert cause(good, torch_runtime) is None
    assert "static C++ runtime (no NEEDED libstdc++.so.6)" in cause(good[:2], torch_runtime)
    assert cause(["libc++.so.1", *good[1:]], torch_runtime).startswith(
        "the extension links libc++.so.1"
    )
    assert cause(["libunwind.so.8", *good], torch_runtime) == (
        "libunwind.so.8 comes before libgcc_s among the extension's libraries"
    )
    assert cause([], torch_runtime) is None and cause(good, "") is None


@pytest.mark.skipif(sys.platform != "linux", reason="reads the ELF libraries of a Linux build")
def test_only_the_stages_named_run(tmp_path):
    out = tmp_path / "out"
    done = check(out, "--cpu-smoke", "--stages", "environment", "native-build", timeout=120)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    result = json.loads((out / "gpu-check.json").read_text())
    stages = {s["name"]: (s["status"], s["detail"]) for s in result["stages"]}
    assert stages["environment"][0] == stages["native-build"][0] == "passed", stages
    for name in ("install", "correctness", "gpu-tests", "benchmarks", "tests"):
        assert stages[name] == ("skipped", "not among --stages"), name
    assert result["command"].endswith("--stages environment native-build")
    # This build shares torch's C++ runtime: nothing to name.
    assert result["native_build"]["runtime_cause"] is None


def test_tests_run_in_workers_and_with_a_time_limit_where_the_plugins_are(tmp_path):
    """pytest-xdist turns a test that kills its process into one failure (the H100's build
    crashed on argument errors and took the rest of the suite with it); pytest-timeout keeps
    one slow test from taking the whole stage."""
    check_module = load_check()
    check = fake_check(check_module, tmp_path, {})
    report = tmp_path / "r.xml"
    check.result["environment"] = {"cpus": 16, "xdist": True, "pytest_timeout": True}
    argv = check.pytest_argv("tests", ["p"], "not gpu", 100, report)
    assert argv[argv.index("-n") + 1] == "4" and "--timeout=50" in argv
    assert f"--junitxml={report}" in argv
    argv = check.pytest_argv("gpu-tests", ["p"], "gpu", 120, report)
    assert argv[argv.index("-n") + 1] == "1" and "--timeout=60" in argv
    check.result["environment"] = {"cpus": 2}
    argv = check.pytest_argv("tests", ["p"], "not gpu", 100, report)
    assert "-n" not in argv and not any(a.startswith("--timeout") for a in argv)


def test_failed_tests_are_kept_with_their_first_message_line(tmp_path):
    report = tmp_path / "r.xml"
    report.write_text(
        '<testsuites><testsuite tests="3" failures="1" errors="1" skipped="0">'
        '<testcase classname="t.test_a" name="test_ok"/>'
        '<testcase classname="t.test_a" name="test_bad[1]">'
        '<failure message="AssertionError: 2 != 3&#10;more">trace</failure></testcase>'
        '<testcase classname="t.test_b" name="test_setup"><error message="">boom&#10;x</error>'
        "</testcase></testsuite></testsuites>"
    )
    check_module = load_check()
    assert check_module.junit_failures(report) == [
        "t.test_a::test_bad[1]: AssertionError: 2 != 3",
        "t.test_b::test_setup: boom",
    ]
    assert check_module.junit_counts(report) == {
        "passed": 1, "failed": 1, "errors": 1, "skipped": 0
    }  # fmt: skip
    assert check_module.junit_failures(tmp_path / "missing.xml") == []


def test_the_commit_comes_from_the_environment_first(tmp_path, monkeypatch):
    check_module = load_check()
    monkeypatch.setattr(check_module, "ROOT", tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    monkeypatch.setenv("CHECK_COMMIT", "abc1234")
    assert check_module.git_commit() == "abc1234"
    monkeypatch.delenv("CHECK_COMMIT")
    assert check_module.git_commit() == "unknown"
    monkeypatch.setattr(check_module, "ROOT", ROOT)
    assert check_module.git_commit() not in ("unknown", "abc1234")
    # Over the tree's own repository too: the variable is what the person running it says.
    monkeypatch.setenv("CHECK_COMMIT", "abc1234")
    assert check_module.git_commit() == "abc1234"


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_tree_copied_into_another_repository_is_not_that_repository_s_commit(
    tmp_path, monkeypatch
):
    check_module = load_check()
    outer = tmp_path / "outer"
    tree = outer / "copy"
    tree.mkdir(parents=True)
    git = ["git", "-C", str(outer), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "outer"], check=True)
    monkeypatch.setattr(check_module, "ROOT", tree)
    monkeypatch.delenv("CHECK_COMMIT", raising=False)
    assert check_module.git_commit() == "unknown"
    monkeypatch.setenv("CHECK_COMMIT", "46eb63e")
    assert check_module.git_commit() == "46eb63e"


@pytest.mark.skipif(sys.platform != "linux", reason="ldd and readelf read Linux builds")
def test_the_runtime_record_names_the_unwinder_and_the_extension_s_first_library():
    check_module = load_check()
    native = pytest.importorskip("hstu_ops._native")
    if native._C is None or not (shutil.which("ldd") and shutil.which("readelf")):
        pytest.skip("needs the built extension, ldd and readelf")
    record = check_module.runtime_libraries(Path(native._C.__file__))
    assert "libstdc++" in record and "libgcc_s" in record, record
    assert re.search(r"NEEDED in order: libgcc_s\.so\.\d", record), record
