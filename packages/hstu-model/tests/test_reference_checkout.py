"""Importing the reference: its own notices at import stay off the terminal, nothing else does."""

import sys

import pytest

from hstu_model.reference_checkout import IMPORT_NOTICES, import_quietly


@pytest.fixture
def on_path(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in ("noisy_reference_module", "failing_reference_module"):
        sys.modules.pop(name, None)


def test_the_reference_notice_is_dropped_and_other_lines_pass(on_path, capsys):
    (on_path / "noisy_reference_module.py").write_text(
        f"print({IMPORT_NOTICES[0]!r})\nprint('something else')\nVALUE = 3\n"
    )
    module = import_quietly("noisy_reference_module")
    assert module.VALUE == 3
    assert capsys.readouterr().out == "something else\n"


def test_a_failing_import_raises_and_keeps_what_it_printed(on_path, capsys):
    (on_path / "failing_reference_module.py").write_text(
        f"print({IMPORT_NOTICES[0]!r})\nprint('before the error')\nraise ImportError('broken')\n"
    )
    with pytest.raises(ImportError, match="broken"):
        import_quietly("failing_reference_module")
    assert capsys.readouterr().out == "before the error\n"
