"""The GPU check: install, build, test, check and time hstu-ops on a bare CUDA machine.

    bash tools/gpu/check.sh OUT_DIR              # a CUDA machine, no network, under 8 minutes
    bash tools/gpu/check.sh OUT_DIR --cpu-smoke  # the same stages on the CPU (CI), tiny shapes
    bash tools/gpu/check.sh OUT_DIR --reference CHECKOUT  # also the MLPerf reference's attention
    bash tools/gpu/check.sh OUT_DIR --stages environment native-build  # only those

Runs in the Python that is there (PYTHON, else the one running this). Stages, in order:
  environment   python, torch, triton, numpy, the GPU and the build tools (c++, cmake, nvcc,
                pybind11, scikit-build-core); --cpu-smoke fails here when Triton's interpreter
                cannot run with this numpy (hstu_ops.triton_interpreter_problem)
  install       .ci/install-into-existing-env.sh cuda with INSTALL_OFFLINE=1: hstu-ops built
                with that torch for this GPU's architecture (no build isolation, no dependency
                resolution, no network); packages whose build backend is missing are skipped
                and reached through PYTHONPATH (they are pure Python). Skipped by --cpu-smoke,
                which runs in the workspace environment as it is.
  native-build  what the compiled extension holds (hstu_ops.native_build_info), that a
                native op's argument error reaches Python as a ValueError with its whole
                message (not a crash, not a message cut short), and the cause where either
                fails or the module does not share torch's C++ runtime: a static libstdc++ (no
                NEEDED libstdc++.so.6), another runtime, an unwinder ahead of libgcc_s
  correctness   tools/gpu/correctness.py (hstu_ops.selfcheck): every op family, per kernel and
                dtype, against the PyTorch reference on the same device; worst error per family
  gpu-tests     the hstu-ops tests marked gpu (each test at most half the stage's time where
                pytest-timeout is installed; the first line of each failure is kept)
  benchmarks    packages/hstu-model/benchmarks/bench_gpu.py (BENCH_GPU; --tiny on the CPU):
                first dense-step, the model's training step on plain torch tables (no
                torchrec needed), Triton kernels, at batch 32 and 2,048 tokens per sample,
                then the batch doubled up to 1,024 while it fits, each row with its samples/s
                against the reference's per-GPU figure, its peak memory per sample and how
                busy the GPU was (on the GPU each step at batch 32 also profiled: its ops by
                device time, in the log); then the op families at the yambda-5b layer shape
                at batch 32; the TorchRec model step only where torchrec imports (it builds
                the model's embedding tables with it); with --reference CHECKOUT (the MLPerf
                training repository's recommendation_v4 directory, beside this one) the
                attention also against the reference's own Triton kernel, checked to agree;
                last, where the stage and the budget leave time for the compilation, the
                step with its model's MLPs under torch.compile. The JSON's "dense_step" holds
                the step's rows at batch 32 and at the largest batch, with their targets
  tests         the rest of the hstu-ops tests but the slow ones (--cpu-smoke: the
                kernel-selection tests); in pytest-xdist workers where it is installed, so that
                a test that crashes its process fails alone

--stages STAGE... runs only the stages named (the others are listed as skipped). Each stage
has a timeout, all of them together a budget (--budget seconds); a stage left without time is
skipped. The commit is CHECK_COMMIT where it is set, else that of the git repository whose top
is this tree (a copy inside another repository is "unknown"); the JSON's "docs_name" is where
docs/gpu/ keeps it: <date>-<chip>-<commit>.json. After every stage OUT_DIR/gpu-check.json and OUT_DIR/gpu-check.md are
rewritten (written aside, then renamed), so a stop keeps what was measured; the output of the
commands goes to OUT_DIR/gpu-check.log. Exit status 0 when no stage failed, 1 otherwise,
2 for bad arguments.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# This runs in a Python where nothing of the repository may be installed yet; the error
# convention's package has no dependencies, so its source serves.
sys.path.insert(0, str(ROOT / "packages" / "dlrmv4-cli" / "src"))
import dlrmv4_cli  # noqa: E402

PURE_PACKAGES = (
    "dlrmv4-cli",
    "hstu-model",
    "yambda-data",
    "mlperf-compliance",
    "storage-workloads",
)
PROGRESS = re.compile(r"^([.sFExX]+)(\s+\[\s*\d+%\])?$")
"""A progress line of `pytest -q`."""
STAGE_TIMEOUTS = {  # seconds on an H100 / on two CPU cores, in the order the stages run
    "environment": (30, 30),
    "install": (150, 0),
    "native-build": (30, 30),
    "correctness": (90, 60),
    "gpu-tests": (60, 30),
    "benchmarks": (210, 150),
    "tests": (90, 60),
}
"""Each stage's timeout. On a GPU the budget (--budget, 460 s by default) is what bounds the
whole: the measured stages of one H100/H200 run took 8, 60, 8 and 59 s up to the correctness,
so the GPU tests get 60 s, the benchmarks 210 and the rest of the tests 90."""


REFERENCE_MARKER = "generative_recommenders/ops/triton/triton_hstu_attention.py"
"""What a --reference checkout holds: the reference's Triton attention."""


class Stop(Exception):
    """SIGTERM: end like Ctrl-C, keeping what was measured."""


class UsageError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise UsageError(message)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = Parser(prog="tools/gpu/check.sh", description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path, help="folder for gpu-check.json/.md/.log")
    parser.add_argument("--cpu-smoke", action="store_true", help="CPU, interpreter, tiny shapes")
    parser.add_argument("--budget", type=float, default=460.0, help="seconds for all stages")
    parser.add_argument(
        "--reference",
        type=Path,
        metavar="CHECKOUT",
        help="the MLPerf reference's recommendation_v4 directory: the benchmarks time its "
        "Triton attention against ours",
    )
    parser.add_argument(
        "--stages",
        nargs="+",
        metavar="STAGE",
        help=f"run only these stages (of {', '.join(STAGE_TIMEOUTS)}); the others are listed "
        "as skipped",
    )
    if not [a for a in (sys.argv[1:] if argv is None else argv) if not a.startswith("-")]:
        raise UsageError("OUT_DIR is missing")
    args = parser.parse_args(argv)
    if args.out_dir.exists() and not args.out_dir.is_dir():
        raise UsageError(f"OUT_DIR {args.out_dir}: not a directory")
    unknown = [s for s in args.stages or () if s not in STAGE_TIMEOUTS]
    if unknown:
        raise UsageError(
            f"--stages {unknown[0]}: no such stage (the stages: {', '.join(STAGE_TIMEOUTS)})"
        )
    if args.reference and not (args.reference / REFERENCE_MARKER).is_file():
        raise UsageError(
            f"--reference {args.reference}: no {REFERENCE_MARKER} (the recommendation_v4 "
            "directory of the MLPerf training repository)"
        )
    return args


class Check:
    def __init__(
        self,
        out_dir: Path,
        smoke: bool,
        budget: float,
        reference: Path | None = None,
        stages: list[str] | None = None,
    ) -> None:
        self.out, self.smoke = out_dir, smoke
        self.stages = stages
        self.reference = reference.resolve() if reference else None
        self.python = os.environ.get("PYTHON", sys.executable)
        self.deadline = time.monotonic() + budget
        self.log = (out_dir / "gpu-check.log").open("a", buffering=1)
        self.env = dict(os.environ, PYTHONUNBUFFERED="1")
        src = [str(ROOT / "packages" / p / "src") for p in PURE_PACKAGES]
        self.env["PYTHONPATH"] = os.pathsep.join([*src, self.env.get("PYTHONPATH", "")]).rstrip(
            os.pathsep
        )
        if smoke:
            # No GPU even where there is one. The correctness and benchmark scripts then run the
            # Triton kernels in the interpreter (they set TRITON_INTERPRET=1 themselves); the
            # tests choose the interpreter per test.
            self.env["CUDA_VISIBLE_DEVICES"] = ""
        self.result = {
            "mode": "cpu-smoke" if smoke else "gpu",
            "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "commit": git_commit(),
            "command": "tools/gpu/check.sh OUT_DIR"
            + (" --cpu-smoke" if smoke else "")
            + (" --reference CHECKOUT" if reference else "")
            + (f" --stages {' '.join(stages)}" if stages else ""),
            "budget_s": budget,
            "stages": [],
            "environment": {},
            "correctness": None,
            "benchmarks": None,
            "skipped": [],
        }

    # ---- running commands ------------------------------------------------------------
    def say(self, text: str) -> None:
        print(text, flush=True)
        self.log.write(text + "\n")

    def command(self, stage: str, argv: list[str], timeout: float, env=None) -> tuple[int, str]:
        """Runs argv, streaming its output; (exit status or None on timeout, output tail)."""
        shown = [*argv[:2], "PROBE"] if "-c" in argv[1:2] else argv
        self.say(f"[{stage}] $ {' '.join(shown)}")
        proc = subprocess.Popen(
            argv, cwd=ROOT, env=env or self.env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )  # fmt: skip
        tail: list[str] = []
        self.progress = {}  # pytest's progress characters so far (kept when it is stopped)

        def pump():
            for line in proc.stdout:
                line = line.rstrip("\n")
                if PROGRESS.match(line):
                    for char in PROGRESS.match(line).group(1):
                        self.progress[char] = self.progress.get(char, 0) + 1
                print(f"  {line}", flush=True)
                self.log.write(line + "\n")
                tail.append(line)
                del tail[:-40]

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = None
        except BaseException:
            kill(proc)
            raise
        if rc is None:
            kill(proc)
        reader.join(timeout=5)
        return rc, "\n".join(tail)

    # ---- results -----------------------------------------------------------------------
    def write(self) -> None:
        self.result["written"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        self.result["docs_name"] = docs_name(self.result)
        atomic_write(self.out / "gpu-check.json", json.dumps(self.result, indent=2) + "\n")
        atomic_write(self.out / "gpu-check.md", markdown(self.result))

    def stage(self, name: str, fn) -> None:
        limit = STAGE_TIMEOUTS[name][1 if self.smoke else 0]
        left = self.deadline - time.monotonic()
        record = {"name": name, "status": "skipped", "seconds": 0.0, "detail": ""}
        self.result["stages"].append(record)
        if self.stages is not None and name not in self.stages:
            record["detail"] = "not among --stages"
        elif limit == 0:
            record["detail"] = "not part of the CPU smoke (it runs in the workspace environment)"
        elif left < 10:
            record["detail"] = f"no time left in the {self.result['budget_s']:.0f} s budget"
        else:
            self.say(f"== {name} (timeout {min(limit, left):.0f} s)")
            started = time.monotonic()
            try:
                record["status"], record["detail"] = fn(min(limit, left))
            except (KeyboardInterrupt, Stop):
                record["status"], record["detail"] = "interrupted", "stopped while running"
                record["seconds"] = round(time.monotonic() - started, 1)
                self.write()
                raise
            except Exception as e:
                record["status"], record["detail"] = "failed", f"{type(e).__name__}: {e}"
            record["seconds"] = round(time.monotonic() - started, 1)
        self.say(f"== {name}: {record['status']} {record['detail']}".rstrip())
        self.write()

    def outcome(self, rc, tail: str, timeout: float, ok_detail: str = "") -> tuple[str, str]:
        if rc is None:
            return "timeout", f"stopped after {timeout:.0f} s"
        if rc != 0:
            return "failed", f"exit status {rc}: {tail.splitlines()[-1] if tail else ''}"
        return "passed", ok_detail

    # ---- stages ------------------------------------------------------------------------
    def environment(self, timeout):
        probe = (
            "import json, os, platform, torch\n"
            "info = {'python': platform.python_version(), 'torch': torch.__version__,"
            " 'cuda': torch.version.cuda, 'gpu': None, 'capability': None, 'cpus': os.cpu_count()}\n"
            "try:\n    import triton; info['triton'] = triton.__version__\n"
            "except Exception as e:\n    info['triton'] = None\n"
            "try:\n    import numpy; info['numpy'] = numpy.__version__\n"
            "except Exception as e:\n    info['numpy'] = None\n"
            "import importlib.metadata as md, importlib.util as iu\n"
            "for name in ('pybind11', 'scikit-build-core'):\n"
            "    try:\n        info[name] = md.version(name)\n"
            "    except md.PackageNotFoundError:\n        info[name] = None\n"
            "for plugin in ('pytest_timeout', 'xdist'):\n"
            "    info[plugin] = iu.find_spec(plugin) is not None\n"
            "try:\n    import hstu_ops\n"
            "    info['interpreter_problem'] = hstu_ops.triton_interpreter_problem()\n"
            "except Exception:\n    info['interpreter_problem'] = None\n"
            "if torch.cuda.is_available():\n"
            "    info['gpu'] = torch.cuda.get_device_name(0)\n"
            "    info['capability'] = '%d%d' % torch.cuda.get_device_capability(0)\n"
            "print('ENV ' + json.dumps(info))\n"
        )
        rc, tail = self.command("environment", [self.python, "-c", probe], timeout)
        for line in tail.splitlines():
            if line.startswith("ENV "):
                self.result["environment"] = json.loads(line[4:])
        env = self.result["environment"]
        # The tools that build the extension: a native op that crashes where it should raise
        # is a mismatch between them and the torch it runs in.
        for tool in ("nvcc", "c++", "cmake"):
            env[tool] = tool_version(tool)
        env["build_variables"] = {k: os.environ[k] for k in BUILD_VARIABLES if os.environ.get(k)}
        if rc == 0 and not self.smoke and not env.get("gpu"):
            return "failed", "torch sees no GPU (use --cpu-smoke on a machine without one)"
        if rc == 0 and self.smoke and env.get("interpreter_problem"):
            return "failed", env["interpreter_problem"]
        return self.outcome(
            rc, tail, timeout, f"{env.get('gpu') or 'CPU'}, torch {env.get('torch')}"
        )

    def install(self, timeout):
        env = dict(self.env, INSTALL_OFFLINE="1", PYTHON=self.python)
        capability = self.result["environment"].get("capability")
        if capability and "CMAKE_ARGS" not in env:
            env["CMAKE_ARGS"] = f"-DCMAKE_CUDA_ARCHITECTURES={capability}"
        script = str(ROOT / ".ci" / "install-into-existing-env.sh")
        rc, tail = self.command("install", ["bash", script, "cuda"], timeout, env)
        skipped = [line for line in tail.splitlines() if line.startswith("skipped ")]
        self.result["skipped"] += [f"install: {s}; used from the source tree" for s in skipped]
        return self.outcome(rc, tail, timeout, "; ".join(skipped))

    def native_build(self, timeout):
        probe = "import json, hstu_ops; print('NATIVE ' + json.dumps(hstu_ops.native_build_info()))"
        rc, tail = self.command("native-build", [self.python, "-c", probe], timeout)
        info = {}
        for line in tail.splitlines():
            if line.startswith("NATIVE "):
                info = json.loads(line[7:])
        self.result["native_build"] = info
        status, detail = self.outcome(rc, tail, timeout)
        if status == "passed":
            detail = ", ".join(f"{k}={v}" for k, v in info.items() if k != "error")
            if not self.smoke and not info.get("cuda"):
                status = "failed"
                detail = f"the extension has no CUDA ops: {info.get('error') or detail}"
            elif info.get("cpu"):
                problem = self.native_error_problem(timeout)
                if problem:
                    status, detail = "failed", problem
        return status, detail

    def native_error_problem(self, timeout) -> str | None:
        """What is wrong with how a native op's argument error reaches Python, and the cause
        found in the extension's libraries; None when the error arrives whole and the module
        shares torch's C++ runtime. Seen: on one H100 image (GCC 13.3 with only libstdc++.a)
        every argument error killed the process (signal 11); a GCC 12 build with a static
        libstdc++ loses every number of the message; a build that puts libunwind ahead of
        libgcc_s crashes too (CMakeLists.txt prevents both)."""
        rc, tail = self.command("native-build", [self.python, "-c", NATIVE_ERROR_PROBE], timeout)
        lines = tail.splitlines()
        found = [x.split(" ", 1)[1] for x in lines if x.startswith("NATIVE-SO ")]
        torch_runtime = next((x[15:] for x in lines if x.startswith("NATIVE-RUNTIME ")), "")
        extension = Path(found[0]) if found else None
        runtime = runtime_libraries(extension) if extension else "the extension was not found"
        record = self.result["native_build"]
        record["runtime_libraries"] = runtime
        record["torch_cxx_runtime"] = torch_runtime or None
        cause = runtime_cause(needed_libraries(extension), torch_runtime) if extension else None
        record["runtime_cause"] = cause
        message = next((x[13:] for x in lines if x.startswith("NATIVE-ERROR ")), None)
        symptom = None
        if rc is None:
            symptom = "timed out"
        elif rc < 0:
            symptom = f"killed by signal {-rc}"
        elif rc != 0 or message is None:
            symptom = f"exit status {rc}, no ValueError"
        elif message != NATIVE_ERROR_MESSAGE:
            symptom = f"ValueError with a damaged message {message!r}"
        if symptom is None and cause is None:
            return None
        env = self.result["environment"]
        what = (
            f"a native op's argument error did not reach Python whole ({symptom})"
            if symptom
            else "a native op's argument error reached Python, but"
        )
        return (
            f"{what}; cause: {cause or 'not found in the libraries'} (c++: {env.get('c++')}, "
            f"pybind11 {env.get('pybind11')}, torch {env.get('torch')}, build variables "
            f"{env.get('build_variables') or 'none'}; {runtime})"
        )

    def collected(self, key: str, argv: list[str], path: Path, stage: str, timeout):
        """Runs a script that writes `path` as it goes; its content becomes result[key], also
        when the run is stopped or times out."""
        try:
            return self.command(stage, [*argv, "--json", str(path)], timeout)
        finally:
            if path.exists():
                self.result[key] = json.loads(path.read_text())
                path.unlink()

    def correctness(self, timeout):
        argv = [self.python, str(ROOT / "tools/gpu/correctness.py")]
        argv += ["--tiny", "--device", "cpu"] if self.smoke else ["--device", "cuda"]
        path = self.out / "correctness.tmp.json"
        rc, tail = self.collected("correctness", argv, path, "correctness", timeout)
        status, detail = self.outcome(rc, tail, timeout)
        found = self.result["correctness"]
        if found and found["finished"]:
            failures = found["failures"]
            status = "failed" if rc else "passed"
            detail = (
                f"{failures} op/kernel/dtype checks failed" if failures else "all within tolerance"
            )
        return status, detail

    def pytest_argv(self, name: str, paths: list[str], marks: str, timeout, report: Path):
        argv = [self.python, "-m", "pytest", *paths, "-q", "-p", "no:cacheprovider", "-m", marks]
        argv += [f"--junitxml={report}", "--tb=short", "-rfE"]
        env = self.result["environment"]
        if env.get("pytest_timeout"):
            # One slow test fails alone instead of taking the stage, and its report survives.
            argv += [f"--timeout={max(10, int(timeout / 2))}"]
        if env.get("xdist"):
            # In worker processes a test that crashes the interpreter fails alone (pytest-xdist
            # restarts the worker) and the others still run; the GPU tests share one worker.
            workers = 1 if name == "gpu-tests" else max(1, min(4, (env.get("cpus") or 1) // 2))
            argv += ["-n", str(workers)]
        return argv

    def pytest(self, name: str, paths: list[str], marks: str, timeout):
        report = self.out / f"{name}.tmp.xml"
        argv = self.pytest_argv(name, paths, marks, timeout, report)
        rc, tail = self.command(name, argv, timeout)
        counts = junit_counts(report)
        failures = junit_failures(report)
        report.unlink(missing_ok=True)
        if failures:
            self.result.setdefault("test_failures", {})[name] = failures
        if not counts and self.progress:  # stopped before its report: what it printed
            names = {".": "passed", "F": "failed", "E": "errors", "s": "skipped"}
            counts = {names[c]: n for c, n in self.progress.items() if c in names}
        self.result.setdefault("tests", {})[name] = counts
        if rc == 5:  # nothing collected
            return "passed", "no test selected"
        status, detail = self.outcome(rc, tail, timeout)
        if counts:
            detail = ", ".join(f"{v} {k}" for k, v in counts.items() if v) + (
                f"; {detail}" if status != "passed" else ""
            )
        return status, detail

    def gpu_tests(self, timeout):
        return self.pytest("gpu-tests", ["packages/hstu-ops"], "gpu", timeout)

    def tests(self, timeout):
        if self.smoke:
            paths = ["packages/hstu-ops/tests/test_kernel_selection.py"]
            paths.append("packages/hstu-ops/tests/test_device_kernel.py")
            return self.pytest("tests", paths, "not gpu", timeout)
        self.result["skipped"].append(
            "tests: the hstu-ops tests marked slow (compile-only checks for GPU targets and "
            "fresh-interpreter checks, which CI runs; the GPU stages here supersede them)"
        )
        return self.pytest("tests", ["packages/hstu-ops"], "not gpu and not slow", timeout)

    def benchmarks(self, timeout):
        started = time.monotonic()
        path = self.out / "bench.tmp.json"
        # The training step first: it is the figure the check is run for, and a stage that runs
        # out of time keeps the rows timed before it stopped.
        families = ["dense-step", "ops"]  # bench_gpu's every op family
        probe = subprocess.run(
            [self.python, "-c", "import torchrec"], env=self.env, capture_output=True, check=False
        )
        if probe.returncode == 0:
            families.append("model-step")
        else:
            self.result["skipped"].append(
                "benchmarks: model-step (the full training step needs torchrec and fbgemm-gpu for "
                "its embedding tables; neither is installed in this Python; dense-step times "
                "the same model on plain torch tables)"
            )
        script = str(ROOT / "packages/hstu-model/benchmarks/bench_gpu.py")
        argv = [self.python, script, "--families", *families]
        argv += BENCH_TINY if self.smoke else BENCH_GPU
        if self.reference:
            argv += ["--reference", str(self.reference)]
        else:
            self.result["skipped"].append(
                "benchmarks: the attention against the MLPerf reference's Triton kernel (no "
                "--reference CHECKOUT given)"
            )
        rc, tail = self.collected("benchmarks", argv, path, "benchmarks", timeout)
        status, detail = self.outcome(rc, tail, timeout)
        # Then the step with its model's MLPs compiled, where the stage has time left for
        # the compilation: a row that only adds to the eager ones.
        left = timeout - (time.monotonic() - started)
        need = COMPILED_STEP_SECONDS[1 if self.smoke else 0]
        if not self.smoke:
            # ... and only where the stages after this one keep their time in the budget. The
            # smoke runs it in what the stage has left: it keeps the path working, untimed.
            left = min(left, self.deadline - time.monotonic() - STAGE_TIMEOUTS["tests"][0])
        if status == "passed" and left >= max(need, 1):
            eager = self.result["benchmarks"]
            argv = [self.python, script, "--families", "dense-step"]
            argv += BENCH_TINY_COMPILED if self.smoke else BENCH_GPU_COMPILED
            rc, tail = self.collected("benchmarks", argv, path, "benchmarks", left)
            compiled = self.result["benchmarks"] or {}
            eager["rows"] += compiled.get("rows", [])
            self.result["benchmarks"] = eager
            status, detail = self.outcome(rc, tail, left)
        elif status == "passed":
            self.result["skipped"].append(
                f"benchmarks: dense-step compiled ({max(left, 0):.0f} s left for it in the stage "
                f"and the budget, less than the {need} s its compilation may take)"
            )
        rows = (self.result["benchmarks"] or {}).get("rows", [])
        self.result["dense_step"] = dense_step_summary(rows)
        return status, f"{len(rows)} rows" + (f"; {detail}" if detail else "")

    def run(self) -> int:
        self.say(f"GPU check ({self.result['mode']}) of {self.result['commit']} into {self.out}")
        self.write()
        for name, fn in (
            ("environment", self.environment),
            ("install", self.install),
            ("native-build", self.native_build),
            ("correctness", self.correctness),
            ("gpu-tests", self.gpu_tests),
            ("benchmarks", self.benchmarks),
            ("tests", self.tests),
        ):
            self.stage(name, fn)
        failed = [s["name"] for s in self.result["stages"] if s["status"] in ("failed", "timeout")]
        self.result["finished"] = True
        self.write()
        self.say(f"done: {'failed: ' + ', '.join(failed) if failed else 'no stage failed'}")
        self.say(f"results: {self.out / 'gpu-check.json'}, {self.out / 'gpu-check.md'}")
        return 1 if failed else 0


NATIVE_ERROR_MESSAGE = "complete_cumsum: lengths[1] = -1 is negative"
NATIVE_ERROR_PROBE = (
    "import re, sys, torch, hstu_ops, hstu_ops._native as n\n"
    "print('NATIVE-SO', n._C.__file__, flush=True)\n"
    "maps = open('/proc/self/maps').read().split() if sys.platform == 'linux' else []\n"
    "found = [p for p in maps if re.search(r'/lib(std)?c\\+\\+\\.so', p)]\n"
    "print('NATIVE-RUNTIME', found[0] if found else '', flush=True)\n"
    "try:\n"
    "    hstu_ops.complete_cumsum(torch.tensor([1, -1]), kernel='native')\n"
    "except ValueError as e:\n"
    "    print('NATIVE-ERROR', e)\n"
)
"""Makes a native op raise its argument error, after naming the extension and the C++ runtime
the process loaded (with torch); NATIVE_ERROR_MESSAGE is what must arrive."""

BENCH_GPU = [
    "--batch-sizes", "32", "--dense-step-lengths", "2048", "--warmup", "2", "--iters", "5",
    "--largest-batch", "dense-step", "--largest-batch-limit", "1024",
    "--dense-step-kernels", "triton", "--profile-steps",
]  # fmt: skip
"""bench_gpu's settings on a GPU: the step at batch 32 and 2,048 tokens (the published
figures' shape), then doubled up to batch 1,024 while it fits; the op families at batch 32.
Fewer shapes than bench_gpu's defaults, so that every family's rows fit the stage."""
BENCH_GPU_COMPILED = [
    "--batch-sizes", "32", "--dense-step-lengths", "2048", "--warmup", "3", "--iters", "5",
    "--dense-step-modes", "compiled", "--dense-step-kernels", "triton",
]  # fmt: skip
BENCH_TINY = ["--tiny", "--dense-step-lengths", "16", "--warmup", "0"]
BENCH_TINY_COMPILED = [
    "--tiny", "--dense-step-lengths", "16", "--dense-step-modes", "compiled",
    "--dense-step-kernels", "triton", "--warmup", "0",
]  # fmt: skip
"""The CPU smoke's: one length of the step, as on a GPU (two kernels eager, then compiled), and
no warm-up run: its times are not figures, and the interpreter's runs of the Triton steps take
seconds each."""
COMPILED_STEP_SECONDS = (90, 0)
"""The time the compiled step's run needs at least (GPU, CPU smoke): inductor's compilation of
the model's MLPs, their backward and the timed steps; the smoke runs it in what is left."""
STEP_TARGETS = {32: 1600.0, 1024: 2300.0}
"""Samples/s per GPU the dense step is to reach at 2,048 tokens, by batch (1.3x of what the
reference reaches on an MI350X at batch 1,024)."""


def dense_step_summary(rows: list[dict]) -> dict:
    """The dense-step rows the check is run for: at batch 32 and at the largest batch that ran,
    2,048 tokens per sample, each mode; with the targets where there is one."""
    found = [
        r for r in rows
        if r["family"] == "dense-step" and r["ms"] is not None and " N=2048" in r["shape"]
    ]  # fmt: skip
    summary = {}
    for r in found:
        mode = "compiled" if r["shape"].endswith("compiled") else "eager"
        key = f"{r['kernel']} {mode}"
        entry = summary.setdefault(key, {})
        picked = {
            k: r.get(k)
            for k in ("batch", "ms", "samples_per_s", "gpu_busy", "peak_mib_per_sample",
                      "published_samples_per_s", "vs_published")
        }  # fmt: skip
        picked["target_samples_per_s"] = STEP_TARGETS.get(r["batch"])
        if r["batch"] == 32:
            entry["batch_32"] = picked
        if r["batch"] >= max((x["batch"] for x in found if x["kernel"] == r["kernel"]), default=0):
            entry["largest_batch"] = picked
    return summary


BUILD_VARIABLES = ("CC", "CXX", "CFLAGS", "CXXFLAGS", "LDFLAGS", "CMAKE_ARGS", "CUDAHOSTCXX")
"""Environment variables that change how the extension is compiled and linked."""


def runtime_libraries(extension: Path) -> str:
    """The C++ runtime and unwinder libraries ``ldd`` resolves for the extension (a statically
    linked libstdc++ shows as its absence), then the extension's own NEEDED libraries in order
    (``readelf``): the build names libgcc_s first, so that no other unwinder ahead of it takes
    torch's exceptions (CMakeLists.txt). A tool that is missing is named instead."""
    parts = []
    ldd = shutil.which("ldd")
    if ldd:
        done = subprocess.run([ldd, str(extension)], capture_output=True, text=True, check=False)
        names = ("libstdc++", "libgcc_s", "libunwind", "libc10.so", "libc++")
        found = [x.strip() for x in done.stdout.splitlines() if any(n in x for n in names)]
        parts.append(f"ldd {extension.name}: " + ("; ".join(found) or "no C++ runtime listed"))
    else:
        parts.append("no ldd")
    readelf = shutil.which("readelf")
    if readelf:
        done = subprocess.run(
            [readelf, "-d", str(extension)], capture_output=True, text=True, check=False
        )
        needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", done.stdout)
        parts.append("NEEDED in order: " + (", ".join(needed) or "none read"))
    else:
        parts.append("no readelf")
    return "; ".join(parts)


def needed_libraries(extension: Path) -> list[str]:
    """The extension's NEEDED libraries in order (readelf), [] where it cannot be read."""
    readelf = shutil.which("readelf")
    if not readelf or not extension.exists():
        return []
    done = subprocess.run([readelf, "-d", str(extension)], capture_output=True, text=True)
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", done.stdout)


def runtime_cause(needed: list[str], torch_runtime: str) -> str | None:
    """Why the extension's C++ runtime or unwinder is not torch's, from its NEEDED libraries
    and the runtime file torch's process loaded; None when nothing is wrong or it cannot tell."""
    if not needed or not torch_runtime:
        return None
    want = re.search(r"lib(std)?c\+\+\.so\.\d+", Path(torch_runtime).name)
    if not want:
        return None
    runtimes = [n for n in needed if re.match(r"lib(std)?c\+\+\.so", n)]
    if not runtimes:
        return (
            f"the extension carries its own static C++ runtime (no NEEDED {want.group(0)}) "
            f"beside the shared {torch_runtime} that torch loads: its compiler had no shared "
            "libstdc++ on its link path, or -static-libstdc++ was among its flags"
        )
    if runtimes[0] != want.group(0):
        return f"the extension links {runtimes[0]}, torch loads {torch_runtime}"
    unwinders = [n for n in needed if n.startswith(("libunwind", "libgcc_s"))]
    if unwinders and not unwinders[0].startswith("libgcc_s"):
        return f"{unwinders[0]} comes before libgcc_s among the extension's libraries"
    return None


def tool_version(tool: str) -> str | None:
    """The line of ``tool --version`` that names the version ("cmake version 3.25.1", "Cuda
    compilation tools, release 13.0, V13.0.48"; else the first line, as gcc's), or None."""
    path = shutil.which(tool)
    if not path:
        return None
    done = subprocess.run([path, "--version"], capture_output=True, text=True, check=False)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return None
    return next((x for x in lines if "version" in x or "release" in x), lines[0]).strip()


def kill(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=5)
            return
        except subprocess.TimeoutExpired:
            continue


def atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def docs_name(result: dict) -> str:
    """Where docs/gpu/ keeps this result: <date>-<chip>-<commit>.json (the chip from the GPU's
    name, "cpu" without one)."""
    chip = (result.get("environment") or {}).get("gpu") or "cpu"
    chip = re.sub(r"[^a-z0-9]+", "-", chip.lower()).strip("-")
    return f"{result['started'][:10]}-{chip}-{result['commit']}.json"


def git_commit() -> str:
    """CHECK_COMMIT where it is set (a tree copied to a GPU machine without its git folder,
    maybe into another repository); else the commit of the repository whose top is this tree;
    else "unknown" (a tree inside another repository is not that repository's commit)."""
    given = os.environ.get("CHECK_COMMIT", "").strip()
    if given:
        return given
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--show-toplevel", "--short", "HEAD"],
            cwd=ROOT, capture_output=True, text=True,
        )  # fmt: skip
    except OSError:  # no git at all
        return "unknown"
    lines = out.stdout.split()
    if out.returncode != 0 or len(lines) != 2 or Path(lines[0]).resolve() != ROOT.resolve():
        return "unknown"
    return lines[1]


def junit_counts(path: Path) -> dict:
    if not path.exists():
        return {}
    root = ET.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    tests, skipped = int(suite.get("tests", 0)), int(suite.get("skipped", 0))
    failed, errors = int(suite.get("failures", 0)), int(suite.get("errors", 0))
    passed = tests - skipped - failed - errors
    return {"passed": passed, "failed": failed, "errors": errors, "skipped": skipped}


def junit_failures(path: Path, limit: int = 30) -> list[str]:
    """'test id: first line of the message' per failed or erroring test (the first ``limit``)."""
    if not path.exists():
        return []
    found = []
    for case in ET.parse(path).getroot().iter("testcase"):
        for outcome in (case.find("failure"), case.find("error")):
            if outcome is not None:
                message = (outcome.get("message") or outcome.text or "").strip().splitlines()
                test = f"{case.get('classname', '')}::{case.get('name', '')}"
                found.append(f"{test}: {message[0][:300] if message else ''}")
    return found[:limit]


def fmt_err(entry: dict | None) -> str:
    if not entry:
        return "-"
    if not entry.get("ops"):
        return "unavailable" if entry.get("unavailable") else "failed"
    text = f"{entry['error']:.1e}"
    return text if entry.get("passed") else f"**{text} FAIL**"


def vs_published(row: dict) -> str:
    """samples/s over the published figure, which the cell names; the figure alone where the
    ratio means nothing (not on a GPU)."""
    published = row.get("published_samples_per_s")
    if published is None:
        return "-"
    if row.get("vs_published") is None:
        return f"- (published {published:,.0f})"
    return f"{row['vs_published']:.2f}x of {published:,.0f}"


def markdown(result: dict) -> str:
    env = result["environment"]
    lines = [
        f"# GPU check ({result['mode']})",
        "",
        f"Commit {result['commit']}, started {result['started']}, `{result['command']}`; "
        f"{env.get('gpu') or 'CPU'}, torch {env.get('torch')}, triton {env.get('triton')}, "
        f"CUDA {env.get('cuda')}." + ("" if result.get("finished") else " **Unfinished.**"),
        "",
        f"Build tools: {env.get('c++')}; {env.get('cmake')}; nvcc: {env.get('nvcc')}; "
        f"pybind11 {env.get('pybind11')}; scikit-build-core {env.get('scikit-build-core')}; "
        f"numpy {env.get('numpy')}.",
        "",
        "| stage | status | s | detail |",
        "|---|---|---:|---|",
    ]
    for s in result["stages"]:
        detail = s["detail"].replace("|", "/").replace("\n", " ")
        lines.append(f"| {s['name']} | {s['status']} | {s['seconds']:.0f} | {detail} |")
    corr = result.get("correctness")
    if corr:
        tol = corr["tolerances"]
        lines += [
            "",
            f"Correctness on {corr['device']}: worst max|kernel - ref| / max|ref| per family "
            f"(reference: the PyTorch kernel in float32 on the same inputs; tolerance float32 "
            f"{tol['float32']:g}, bfloat16 {tol['bfloat16']:g}).",
            "",
            "| family | kernel | float32 | bfloat16 | worst op |",
            "|---|---|---:|---:|---|",
        ]
        for family, kernels in corr["families"].items():
            for kernel, per in kernels.items():
                f32, b16 = per.get("float32"), per.get("bfloat16")
                worst = (b16 or f32 or {}).get("worst_op") or "-"
                lines.append(f"| {family} | {kernel} | {fmt_err(f32)} | {fmt_err(b16)} | {worst} |")
    bench = result.get("benchmarks")
    if bench:
        lines += [
            "",
            f"Benchmarks: {bench['header']}",
            "",
            "| family | kernel | shape | ms | samples/s | vs pytorch | TFLOP/s | vs reference "
            "| peak MiB/sample | vs published | note |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for r in bench["rows"]:
            ms = "-" if r["ms"] is None else f"{r['ms']:.3f}"
            rate = "-" if r["samples_per_s"] is None else f"{r['samples_per_s']:,.1f}"
            speed = "-" if r["speedup"] is None else f"{r['speedup']:.2f}x"
            tflops = "-" if r.get("tflops") is None else f"{r['tflops']:.3g}"
            vs_ref = "-" if r.get("vs_reference") is None else f"{r['vs_reference']:.2f}x"
            memory = r.get("peak_mib_per_sample")
            memory = "-" if memory is None else f"{memory:,.1f}"
            lines.append(
                f"| {r['family']} | {r['kernel']} | {r['shape']} | {ms} | {rate} | {speed} | "
                f"{tflops} | {vs_ref} | {memory} | {vs_published(r)} | "
                f"{r['note'].replace('|', '/')} |"
            )
        for family, largest in (bench.get("largest_batch") or {}).items():
            lines += ["", f"Largest batch that ran, {family}: {largest}"]
    for name, failures in (result.get("test_failures") or {}).items():
        lines += ["", f"Failed in {name}:", ""] + [f"- `{f}`" for f in failures]
    if result["skipped"]:
        lines += ["", "Skipped:", ""] + [f"- {s}" for s in result["skipped"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse(argv)
    except UsageError as e:
        print(dlrmv4_cli.usage_line("check.sh", str(e)), file=sys.stderr)
        return dlrmv4_cli.EXIT_REFUSED
    args.out_dir.mkdir(parents=True, exist_ok=True)

    def on_term(signum, frame):
        raise Stop()

    signal.signal(signal.SIGTERM, on_term)
    check = Check(args.out_dir, args.cpu_smoke, args.budget, args.reference, args.stages)
    try:
        return check.run()
    except (KeyboardInterrupt, Stop):
        check.say("stopped: the results so far are written")
        return dlrmv4_cli.EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
