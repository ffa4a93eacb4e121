"""The agent's on-disk spool of one run's frames: `agent-runs/<run id>/spool.jsonl`.

A frame is numbered, appended and flushed to the spool before it is sent, and stays there until the
control plane acks it, so a dropped connection or an agent restart loses nothing: `unacked()` is what
to replay. `RunSpool` is the durable twin of `wire.acks.Outbox` (which does the numbering).

File format: one JSON object per line, each either a frame exactly as sent (`encode(frame)`) or an ack
marker `{"_acked": N}` (frames up to seq N are acked). Acks only append a marker; the file is rewritten
(compacted to a marker plus the unacked frames, through a temporary file and an atomic rename) once
enough acked frames pile up, so the cost of rewriting stays proportional to what was appended.

Each unacked frame's line is also kept in memory, so a replay sends the very text that was spooled
(`encoded_after`) instead of encoding every frame again, and compaction writes it back as is.

Crash safety: a line is complete only with its newline. After a crash mid-write, reloading ignores the
torn last line and cuts it off the file so the next append starts on a fresh line. By default lines are
flushed to the OS (surviving the agent process dying) but not fsynced per frame (that would cap
throughput at the disk's sync rate); `durable=True` fsyncs each write for machines that may lose power.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections import deque
from pathlib import Path
from typing import Iterable

from . import private
from ..wire.acks import Outbox
from ..wire.codec import decode, encode, numbered
from ..wire.frames import ProtocolError, RunFrame

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
    encoded_after(seq) -> (seq, text) of the unacked frames after `seq`, the text as spooled
    """

    def __init__(self, directory: Path, run_id: str, *, compact_after: int = COMPACT_AFTER,
                 durable: bool = False) -> None:
        self.directory = directory
        self.path = directory / SPOOL_FILE
        self.run_id = run_id
        self.compact_after = compact_after
        self.durable = durable
        private.make_dir(directory)
        frames, texts, acked, last_seq, acked_lines = self._load()
        self._outbox = Outbox(run_id, last_seq=last_seq, acked_seq=acked, unacked=frames)
        # (seq, line without its newline) of each unacked frame, in step with the outbox's frames.
        self._texts: deque[tuple[int, str]] = deque((f.seq, t) for f, t in zip(frames, texts))
        self._acked_lines = acked_lines  # acked frames still in the file
        self._deferred: list[str] = []  # lines added with defer=True, not written yet
        self._file = private.open_file(self.path, "a", encoding="utf-8")

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

    def encoded_after(self, seq: int) -> list[tuple[int, str]]:
        """(seq, text) of the unacked frames numbered above `seq`, in order: what to send again,
        exactly as it was spooled."""
        texts = self._texts
        if not texts or texts[-1][0] <= seq:
            return []
        if texts[0][0] > seq:
            return list(texts)
        return [item for item in texts if item[0] > seq]

    # -- writing ----------------------------------------------------------------------------------------
    def add(self, frame: RunFrame) -> RunFrame:
        """Number the frame, write it and flush; the caller sends what this returns."""
        return self.add_many([frame])[0]

    def add_many(self, frames: Iterable[RunFrame]) -> list[RunFrame]:
        return [frame for frame, _ in self.add_many_encoded(frames)]

    def add_many_encoded(self, frames: Iterable[RunFrame], *, defer: bool = False) -> list[tuple[RunFrame, str]]:
        """Like `add_many`, with each frame's encoded text (what to send: it is encoded only once).
        `defer`: keep the lines in memory until `write_deferred` (or any other write) instead of
        writing now; the caller must call it before sending them (several adds, one write)."""
        out: list[tuple[RunFrame, str]] = []
        outbox, texts = self._outbox, self._texts
        try:
            for frame in frames:
                # Encode first: a frame that cannot be written must not take a seq (seqs stay gapless).
                copy = numbered(frame, outbox.last_seq + 1)
                line = encode(copy)
                outbox.add_numbered(copy)
                texts.append((copy.seq, line))
                out.append((copy, line))
        finally:
            if out:  # the frames numbered (before one that failed, too) must reach the file
                lines = "\n".join(line for _, line in out) + "\n"
                if defer:
                    self._deferred.append(lines)
                else:
                    self._write(lines)
        return out

    def write_deferred(self) -> None:
        """Write and flush the lines `add_many_encoded(..., defer=True)` kept back."""
        if self._deferred:
            self._write("")

    def ack(self, seq: int) -> int:
        """Drop frames up to `seq` (ProtocolError `ack_ahead` past the last sent one)."""
        dropped = self._outbox.ack(seq)
        if dropped:
            texts = self._texts
            for _ in range(dropped):
                texts.popleft()
            self._acked_lines += dropped
            self._write(json.dumps({"_acked": self._outbox.acked_seq}) + "\n")
            if self._acked_lines >= self.compact_after and self._acked_lines >= len(self._outbox):
                self.compact()
        return dropped

    def compact(self) -> None:
        """Rewrite the file as one ack marker plus the unacked frames (atomic rename)."""
        tmp = self.path.with_name(SPOOL_FILE + ".tmp")
        with private.open_file(tmp, "w", encoding="utf-8") as out:
            out.write(json.dumps({"_acked": self._outbox.acked_seq}) + "\n")
            out.writelines(text + "\n" for _, text in self._texts)
            out.flush()
            os.fsync(out.fileno())  # the new file must be whole before it replaces the old one
        self._deferred.clear()  # they are among the texts just written
        self._file.close()
        os.replace(tmp, self.path)
        self._fsync_dir()
        self._file = private.open_file(self.path, "a", encoding="utf-8")
        self._acked_lines = 0

    def close(self) -> None:
        if not self._file.closed:
            self.write_deferred()
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
        if self._deferred:  # lines kept back go first: the file stays in seq order
            text = "".join(self._deferred) + text
            self._deferred.clear()
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

    def _load(self) -> tuple[list[RunFrame], list[str], int, int, int]:
        """(unacked frames, their lines, acked seq, last seq, acked frames in the file) from an
        existing spool; cuts a torn last line off the file."""
        frames: list[RunFrame] = []
        lines: list[str] = []
        acked = last = 0
        if not self.path.exists():
            return frames, lines, acked, last, 0
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
            lines.append(raw.decode("utf-8"))
            last = max(last, frame.seq)
        acked_lines = sum(1 for f in frames if f.seq <= acked)
        kept = [(f, t) for f, t in zip(frames, lines) if f.seq > acked]
        return [f for f, _ in kept], [t for _, t in kept], acked, max(last, acked), acked_lines
