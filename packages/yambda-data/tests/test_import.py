import subprocess
import sys


def _run_code(code: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter, where nothing of the package is loaded yet."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_import_does_not_import_torch():
    code = (
        "import sys, yambda_data, yambda_data.cli, yambda_data.samples, yambda_data.split, "
        "yambda_data.synth, yambda_data.schema\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'torch', 'torchrec'})\n"
        "print(bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    result = _run_code(code)
    assert result.returncode == 0, result.stdout + result.stderr


def test_version():
    import yambda_data

    assert yambda_data.__version__ == "0.1.0"


def test_every_public_name_imports_from_its_module_and_nothing_loads_before():
    """The package loads its modules on first use (its names and their modules: the stub
    ``__init__.pyi``); each name of ``__all__`` resolves to the object of that module."""
    code = (
        "import importlib, sys, yambda_data\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('yambda_data.'))\n"
        "assert loaded == [], loaded\n"
        "for name in yambda_data.__all__:\n"
        "    value = getattr(yambda_data, name)\n"
        "    if name != '__version__':\n"
        "        module = importlib.import_module(yambda_data._EXPORTS[name])\n"
        "        assert getattr(module, name) is value, name\n"
        "assert set(yambda_data.__all__) == {*yambda_data._EXPORTS, '__version__'}\n"
        "assert set(yambda_data.__all__) <= set(dir(yambda_data))\n"
        "try:\n"
        "    yambda_data.no_such_name\n"
        "except AttributeError as error:\n"
        "    assert 'no_such_name' in str(error)\n"
        "else:\n"
        "    raise AssertionError('no AttributeError')\n"
    )
    result = _run_code(code)
    assert result.returncode == 0, result.stdout + result.stderr


def test_preprocess_loads_neither_the_generator_nor_the_store():
    code = (
        "import sys, yambda_data.preprocess\n"
        "heavy = {'yambda_data._synth_generate', 'yambda_data._store_read', 'yambda_data.samples'}\n"
        "print(sorted(heavy & set(sys.modules)))\n"
    )
    result = _run_code(code)
    assert result.stdout.strip() == "[]", result.stdout + result.stderr
