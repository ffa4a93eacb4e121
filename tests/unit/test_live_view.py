"""The live terminal view off a terminal (a pipe, a file): progress and metrics at most every few
seconds per node, every state change, and a node's last metrics before it finishes. Time is the
events' own (`at`), as a view fed from a run's log gets it, or an injected clock."""

from __future__ import annotations

import io

from codefy_jupyter.cli.terminal import LiveView


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def epochs(view: LiveView, n: int, seconds_each: float, start: float = 1000.0) -> float:
    """A training node's events for `n` epochs, `seconds_each` apart; the time after the last."""
    at = start
    view({"event": "node_status", "node_id": "train", "node_type": "TrainingLoop", "status": "running"}, at=at)
    for step in range(1, n + 1):
        at += seconds_each
        view({"event": "progress", "node_id": "train", "value": step, "total": n, "label": "epochs"}, at=at)
        for name, value in (("train_loss", 1.0 / step), ("val_loss", 2.0 / step)):
            view({"event": "metric", "node_id": "train", "name": name, "value": value, "step": step}, at=at)
    at += seconds_each
    view({"event": "node_status", "node_id": "train", "node_type": "TrainingLoop", "status": "done",
          "elapsed_s": at - start}, at=at)
    return at


def test_600_epochs_into_a_pipe_are_a_few_lines_ending_with_the_last_metrics():
    out = io.StringIO()
    view = LiveView(out, plain_interval_s=5.0)
    epochs(view, 600, 0.05)  # 30 s of training
    view.close()
    lines = out.getvalue().splitlines()
    assert len(lines) <= 20, lines  # a bar line and a metrics line every 5 s, the last ones, the result
    assert lines[-1].startswith("✓ train (TrainingLoop) 30.")
    assert lines[-2] == "  · train step 600: train_loss 0.001667 · val_loss 0.003333"
    assert lines[0] == "  train [························] 1/600 epochs"
    assert lines[1] == "  · train step 1: train_loss 1 · val_loss 2"
    assert "  train [████████████████████████] 600/600 epochs" in lines
    metric_steps = [line for line in lines if line.startswith("  · train step")]
    assert 5 <= len(metric_steps) <= 9, metric_steps  # every 5 s of 30, plus the last


def test_on_a_terminal_every_step_prints():
    out = Tty()
    view = LiveView(out)
    epochs(view, 50, 0.05)
    view.close()
    assert out.getvalue().count("· train step") == 50


def test_state_changes_always_print_and_held_metrics_come_out_at_close():
    out = io.StringIO()
    clock = iter(range(0, 1000)).__next__  # one second per event
    view = LiveView(out, clock=lambda: float(clock()), plain_interval_s=100)
    view({"event": "metric", "node_id": "a", "name": "loss", "value": 1.0, "step": 1})
    view({"event": "metric", "node_id": "a", "name": "loss", "value": 0.5, "step": 2})
    view({"event": "warning", "node_id": "a", "message": "careful"})
    # A worker's coded warning reads in the message catalog's words, as in Lab and the widgets.
    view({"event": "warning", "node_id": None, "code": "worker_frames_lost", "message": "lost",
          "params": {"worker": "box", "first": 3, "last": 5}})
    view({"event": "metric", "node_id": "a", "name": "loss", "value": 0.25, "step": 3})
    view({"event": "artifact", "kind": "model", "path": "/m.pt"})
    view({"event": "node_status", "node_id": "b", "node_type": "Float", "status": "done", "elapsed_s": 0.0})
    view.close()
    assert out.getvalue().splitlines() == [
        "  · a step 1: loss 1", "  ! a: careful", "  ! run: frames 3 to 5 of this run never arrived from worker box",
        "  ↳ model: /m.pt", "✓ b (Float) 0 ms", "  · a step 3: loss 0.25"]


def test_a_runs_system_metrics_print_no_lines():
    out = Tty()
    view = LiveView(out, plain_interval_s=5.0)
    view({"event": "metric", "node_id": "train", "name": "train_loss", "value": 0.5, "step": 1}, at=1.0)
    for step in range(3):
        view({"event": "metric", "node_id": None, "name": "system/cpu_percent", "value": 80.0, "step": step}, at=2.0)
        view({"event": "metric", "node_id": None, "name": "system/rss_bytes", "value": 3e8, "step": step}, at=2.0)
    view({"event": "node_status", "node_id": "train", "node_type": "TrainingLoop", "status": "done",
          "elapsed_s": 2.0}, at=3.0)
    view.close()
    text = out.getvalue()
    assert "train_loss 0.5" in text and "system/" not in text and "None" not in text
