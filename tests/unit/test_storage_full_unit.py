"""A full disk, in the pieces that decide about it: which errors mean "no room" (one classifier for
SQLite and the OS), and an ending shown to followers before it is durable, which must not move the
seq that acknowledgements go by."""

from __future__ import annotations

import errno
import sqlite3

from codefy_jupyter.core.errors import StorageFull, is_storage_full
from codefy_jupyter.core.runs.event_log import EventLog
from codefy_jupyter.core.store.database import Store
from codefy_jupyter.wire import run_events as ev


def _raised_from(cause: BaseException) -> RuntimeError:
    try:
        raise RuntimeError("a write failed") from cause
    except RuntimeError as err:
        return err


def _raised_during(context: BaseException) -> RuntimeError:
    try:
        try:
            raise context
        except type(context):
            raise RuntimeError("something else went wrong meanwhile")
    except RuntimeError as err:
        return err


def test_sqlite_and_the_os_saying_no_room_are_storage_full():
    assert is_storage_full(sqlite3.OperationalError("database or disk is full"))
    assert is_storage_full(OSError(errno.ENOSPC, "No space left on device"))
    assert is_storage_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert is_storage_full(StorageFull("full"))
    assert is_storage_full(_raised_from(OSError(errno.ENOSPC, "No space left on device")))


def test_other_errors_are_not_storage_full():
    assert not is_storage_full(None)
    assert not is_storage_full(sqlite3.OperationalError("database is locked"))
    assert not is_storage_full(sqlite3.IntegrityError("UNIQUE constraint failed: runs.id"))
    assert not is_storage_full(OSError(errno.EACCES, "Permission denied"))
    assert not is_storage_full(ValueError("database or disk is full"))  # only SQLite's own error says it
    # Raised while handling a full disk is not the same as raised from it.
    assert not is_storage_full(_raised_during(OSError(errno.ENOSPC, "No space left on device")))


def test_storage_full_is_507_with_retry_after_in_the_error_shape():
    err = StorageFull("the disk is full", params={"path": "/data"})
    assert err.status == 507 and err.retry_after_s and err.retry_after_s > 0
    assert err.to_dict() == {"code": "storage_full", "message": "the disk is full", "params": {"path": "/data"}}


async def test_an_announced_ending_is_shown_to_followers_but_not_acknowledgeable(tmp_path):
    store = await Store.open(tmp_path / "codefy.db")
    try:
        log = EventLog(store, payload_cap_bytes=4096, clock=lambda: 5.0)
        await store.create_run({"id": "r1", "status": "running"})
        log.track("r1", 0)
        log.emit("r1", ev.RunEvent("node_status", {"run_id": "r1", "node_id": "n", "status": "running"}))
        await log.flush()
        rows = log.follow_durable("r1", log.take_closing("r1", ev.execution_error(
            "r1", {"code": "event_log_write_failed", "message": "lost", "params": {}})))
        assert [seq for seq, *_ in rows] == [2]
        log.announce("r1", rows)
        assert log.flushed_seq("r1") == 1 and log.visible_seq("r1") == 2
        assert await log.wait_beyond("r1", 1, timeout=1.0)
        texts, cursor, more = log.tail_page("r1", 1, log.visible_seq("r1"), 1 << 20)
        assert cursor == 2 and not more and '"execution_error"' in texts[0]
        # Written later: durable, and the tail holds the closing event once.
        await store.update_run("r1", status="failed", events=rows)
        await log.committed("r1", rows)
        assert log.flushed_seq("r1") == 2 == log.visible_seq("r1")
        texts, cursor, _ = log.tail_page("r1", 0, 2, 1 << 20)
        assert cursor == 2 and len(texts) == 2
        await log.close()
    finally:
        await store.close()
