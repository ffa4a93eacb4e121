"""The headless server raises its logger's level only as far as its handlers already filter."""

from __future__ import annotations

import logging
import uuid

from codefy_jupyter.server.headless import _skip_unseen_records


def logger_with(*handler_levels: int, propagate: bool = False) -> logging.Logger:
    logger = logging.getLogger(f"codefy-test-{uuid.uuid4().hex}")
    logger.setLevel(logging.DEBUG)
    logger.propagate = propagate
    for level in handler_levels:
        handler = logging.NullHandler()
        handler.setLevel(level)
        logger.addHandler(handler)
    return logger


def test_the_level_becomes_the_lowest_one_a_handler_keeps():
    logger = logger_with(logging.WARNING, logging.INFO)
    _skip_unseen_records(logger)
    assert logger.level == logging.INFO
    assert not logger.isEnabledFor(logging.DEBUG) and logger.isEnabledFor(logging.INFO)


def test_a_handler_that_keeps_everything_keeps_debug_on():
    logger = logger_with(logging.INFO, logging.NOTSET)
    _skip_unseen_records(logger)
    assert logger.level == logging.DEBUG


def test_a_propagating_or_handlerless_logger_is_left_alone():
    # Its records may reach handlers elsewhere: their levels are not this logger's to judge.
    for logger in (logger_with(logging.INFO, propagate=True), logger_with()):
        _skip_unseen_records(logger)
        assert logger.level == logging.DEBUG
