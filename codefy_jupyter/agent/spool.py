"""The agent's on-disk spool of one run's frames: `agent-runs/<run id>/spool.jsonl`.

A frame is numbered, appended and flushed to the spool before it is sent, and stays there until the
control plane acks it, so a dropped connection or an agent restart loses nothing: `unacked()` is what
to replay. `RunSpool` is the durable twin of `worker_protocol.Outbox` (which does the numbering).

File format: one JSON object per line, each either a frame exactly as sent (`encode(frame)`) or an ack
marker `{"_acked": N}` (frames up to seq N are acked). Acks only append a marker; the file is rewritten
(compacted to a marker plus the unacked frames, through a temporary file and an atomic rename) once
enough acked frames pile up, so the cost of rewriting stays proportional to what was appended.

Crash safety: a line is complete only with its newline. After a crash mid-write, reloading ignores the
torn last line and cuts it off the file so the next append starts on a fresh line. By default lines are
flushed to the OS (surviving the agent process dying) but not fsynced per frame (that would cap
throughput at the disk's sync rate); `durable=True` fsyncs each write for machines that may lose power.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
from pathlib import Path
from typing import Iterable

from ..core.worker_protocol import Outbox, ProtocolError, RunFrame, decode, encode

SPOOL_FILE = "spool.jsonl"
# Compact once this many acked frames sit in the file (and they outnumber the unacked ones).
COMPACT_AFTER = 4096
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class SpoolError(Exception):
    """The spool cannot be used: a bad run id, or a damaged line before the last one."""


def run_dir(root: str | os.PathLike[str], run_id: str) -> Path:
    """`<root>/<run id>`, refusing run ids that are not a plain file name."""
    if not _RUN_ID.fullmatch(run_id) or run_id in (".", ".."):
        raise SpoolError(f"run id {run_id!r} cannot name a spool folder")
    return Path(root) / run_id


def spooled_runs(root: str | os.PathLike[str]) -> list[str]:
    """Run ids that have a spool under `root` (the agent's `agent-runs/`), sorted."""
    base = Path(root)
    if not base.is_dir():
        return []
    return sorted(p.parent.name for p in base.glob(f"*/{SPOOL_FILE}"))


class RunSpool:
    """One run's durable outbox. Use `RunSpool.open(root, run_id)`; it reloads an existing spool.

    add(frame) -> numbered frame (on disk, flushed; now send it)
    add_many(frames) -> numbered frames (one flush for the batch)
    ack(seq) -> how many frames the ack dropped
    unacked() -> frames to replay after a reconnect, in seq order
    """

    def __init__(self, directory: Path, run_id: str, *, compact_after: int = COMPACT_AFTER,
                 durable: bool = False) -> None:
        self.directory = directory
        self.path = directory / SPOOL_FILE
        self.run_id = run_id
        self.compact_after = compact_after
        self.durable = durable
        directory.mkdir(parents=True, exist_ok=True)
        frames, acked, last_seq, acked_lines = self._load()
        self._outbox = Outbox(run_id, last_seq=last_seq, acked_seq=acked, unacked=frames)
        self._acked_lines = acked_lines  # acked frames still in the file
        self._file = open(self.path, "a", encoding="utf-8")

    @classmethod
    def open(cls, root: str | os.PathLike[str], run_id: str, **kwargs) -> RunSpool:
        return cls(run_dir(root, run_id), run_id, **kwargs)

    # -- state ------------------------------------------------------------------------------------------
    @property
    def last_seq(self) -> int:
        return self._outbox.last_seq

    @property
    def acked_seq(self) -> int:
        return self._outbox.acked_seq

    def __len__(self) -> int:
        return len(self._outbox)

    def unacked(self) -> list[RunFrame]:
        return self._outbox.unacked()

    # -- writing ----------------------------------------------------------------------------------------
    def add(self, frame: RunFrame) -> RunFrame:
        """Number the frame, write it and flush; the caller sends what this returns."""
        return self.add_many([frame])[0]

    def add_many(self, frames: Iterable[RunFrame]) -> list[RunFrame]:
        return [frame for frame, _ in self.add_many_encoded(frames)]

    def add_many_encoded(self, frames: Iterable[RunFrame]) -> list[tuple[RunFrame, str]]:
        """Like `add_many`, with each frame's encoded text (what to send: it is encoded only once)."""
        out: list[RunFrame] = []
        lines: list[str] = []
        for frame in frames:
            try:
                # Encode first: a frame that cannot be written must not take a seq (seqs stay gapless).
                line = encode(dataclasses.replace(frame, seq=self._outbox.last_seq + 1))
                out.append(self._outbox.add(frame))
            except Exception:
                if lines:  # the frames before it were numbered: they must reach the file
                    self._write("".join(lines))
                raise
            lines.append(line + "\n")
        if lines:
            self._write("".join(lines))
        return [(frame, line[:-1]) for frame, line in zip(out, lines)]

    def ack(self, seq: int) -> int:
        """Drop frames up to `seq` (ProtocolError `ack_ahead` past the last sent one)."""
        dropped = self._outbox.ack(seq)
        if dropped:
            self._acked_lines += dropped
            self._write(json.dumps({"_acked": self._outbox.acked_seq}) + "\n")
            if self._acked_lines >= self.compact_after and self._acked_lines >= len(self._outbox):
                self.compact()
        return dropped

    def compact(self) -> None:
        """Rewrite the file as one ack marker plus the unacked frames (atomic rename)."""
        tmp = self.path.with_name(SPOOL_FILE + ".tmp")
        with open(tmp, "w", encoding="utf-8") as out:
            out.write(json.dumps({"_acked": self._outbox.acked_seq}) + "\n")
            out.writelines(encode(f) + "\n" for f in self._outbox.unacked())
            out.flush()
            os.fsync(out.fileno())  # the new file must be whole before it replaces the old one
        self._file.close()
        os.replace(tmp, self.path)
        self._fsync_dir()
        self._file = open(self.path, "a", encoding="utf-8")
        self._acked_lines = 0

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()

    def remove(self) -> None:
        """Delete this run's spool folder (once its run_finished is acked)."""
        self.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> RunSpool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals --------------------------------------------------------------------------------------
    def _write(self, text: str) -> None:
        self._file.write(text)
        self._file.flush()
        if self.durable:
            os.fsync(self._file.fileno())

    def _fsync_dir(self) -> None:
        try:
            fd = os.open(self.directory, os.O_RDONLY)
        except OSError:  # not every platform opens folders (Windows); the rename is still atomic there
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _load(self) -> tuple[list[RunFrame], int, int, int]:
        """(frames, acked seq, last seq, acked frames in the file) from an existing spool; cuts a torn
        last line off the file."""
        frames: list[RunFrame] = []
        acked = last = 0
        if not self.path.exists():
            return frames, acked, last, 0
        with open(self.path, "rb") as f:
            data = f.read()
        complete = data.rfind(b"\n") + 1
        if complete < len(data):  # the last write did not finish: that frame was never sent
            with open(self.path, "r+b") as f:
                f.truncate(complete)
        for number, raw in enumerate(data[:complete].splitlines(), start=1):
            if not raw.strip():
                continue
            try:
                if raw.startswith(b'{"_acked"'):
                    acked = max(acked, int(json.loads(raw)["_acked"]))
                    continue
                frame = decode(raw, sender="agent")
            except (ProtocolError, ValueError, KeyError, TypeError) as err:
                raise SpoolError(f"{self.path} line {number} is damaged: {err}") from None
            if not isinstance(frame, RunFrame) or frame.run_id != self.run_id:
                raise SpoolError(f"{self.path} line {number} is not a frame of run {self.run_id}")
            frames.append(frame)
            last = max(last, frame.seq)
        acked_lines = sum(1 for f in frames if f.seq <= acked)
        return [f for f in frames if f.seq > acked], acked, max(last, acked), acked_lines
