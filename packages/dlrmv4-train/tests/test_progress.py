"""dlrmv4_train.progress: the same facts as lines (logs) and as a bar (a terminal)."""

import io

from dlrmv4_train.progress import Progress, format_duration


def run(progress: Progress) -> None:
    for step in range(1, 11):  # 1 s of training per step of 100 samples
        row = {"loss": 0.5, "lifetime_auc": 0.6} if step % 5 == 0 else None
        progress.step(step, float(step), row)
        if step == 4:
            progress.write("eval at step 4: auc 0.61")
    progress.close()


def test_lines_say_the_plan_the_next_evaluation_and_the_time_to_it():
    lines: list[str] = []
    run(Progress([4, 8, 10], 100, lines.append, bar=False))
    assert lines == [
        "eval at step 4: auc 0.61",
        "step 5/10 · loss 0.5000 · train auc 0.6000 · 100 samples/s · next eval at step 8 in 3s"
        " · planned end in 5s",
        "step 10/10 · loss 0.5000 · train auc 0.6000 · 100 samples/s · next eval at step 10 in 0s",
    ]


def test_a_bar_on_a_terminal_tells_the_same_and_keeps_other_lines_whole():
    stream, lines = io.StringIO(), []
    run(Progress([4, 8, 10], 100, lines.append, stream=stream, bar=True))
    shown = stream.getvalue()
    assert lines == []  # everything went through the bar's stream
    assert "eval at step 4: auc 0.61\n" in shown
    assert "10/10 steps, loss 0.5000 · train auc 0.6000 · 100 samples/s" in shown


def test_durations_read_as_a_person_writes_them():
    assert [format_duration(s) for s in (12, 184, 7500, float("nan"))] == [
        "12s",
        "3m04s",
        "2h05m",
        "?",
    ]
