"""The one final-loss rule (wire/run_summary.py) that the API, the CLI and the widgets show."""

from codefy_jupyter.wire.run_summary import final_loss, is_loss_series


def point(name, value, step=None):
    return {"node_id": "train", "name": name, "value": value, "step": step}


def test_validation_loss_wins_over_training_loss_as_train_logs_them():
    # As the Train node logs them: train_loss then val_loss each epoch (the seen run: 7.4e-4 vs 0.05515).
    points = [point("train_loss", 0.9, 1), point("val_loss", 0.8, 1), point("val_accuracy", 0.5, 1),
              point("train_loss", 7.4e-4, 2), point("val_loss", 0.05515, 2), point("val_accuracy", 0.9, 2)]
    assert final_loss(points) == {"name": "val_loss", "value": 0.05515}
    assert final_loss(list(reversed(points))) == {"name": "val_loss", "value": 0.8}  # the last logged wins


def test_the_order_of_preference():
    base = [point("accuracy", 0.9), point("mse", 0.1), point("r2", 0.5)]
    assert final_loss(base) is None  # the metrics nodes log no loss
    assert final_loss([*base, point("bce_loss", 3.0), point("Zeta_Loss", 2.0)]) == {"name": "Zeta_Loss", "value": 2.0}
    assert final_loss([point("bce_loss", 3.0), point("val_bce_loss", 4.0)]) == {"name": "val_bce_loss", "value": 4.0}
    assert final_loss([point("val_bce_loss", 4.0), point("loss", 1.5)]) == {"name": "loss", "value": 1.5}
    assert final_loss([point("loss", 1.5), point("train_loss", 1.0)]) == {"name": "train_loss", "value": 1.0}
    assert final_loss([point("train_loss", 1.0), point("val_loss", 2.0)]) == {"name": "val_loss", "value": 2.0}


def test_points_that_are_not_a_finite_number_are_skipped():
    assert final_loss([point("loss", "NaN"), point("loss", True), point("loss", None)]) is None
    assert final_loss([point("loss", 2), point("loss", float("nan")), point("loss", float("inf"))]) == \
        {"name": "loss", "value": 2.0}
    assert final_loss([{"value": 1.0}, {"name": 3, "value": 1.0}]) is None
    assert final_loss([]) is None


def test_loss_series_names():
    assert [n for n in ("loss", "val_loss", "BCE_LOSS", "lossy", "accuracy", "gloss") if is_loss_series(n)] == \
        ["loss", "val_loss", "BCE_LOSS", "gloss"]
