import subprocess
import sys


def test_import_does_not_import_torch():
    code = (
        "import sys, yambda_data, yambda_data.cli, yambda_data.samples, yambda_data.split, "
        "yambda_data.synth, yambda_data.schema\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'torch', 'torchrec'})\n"
        "print(bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_version():
    import yambda_data

    assert yambda_data.__version__ == "0.1.0"
