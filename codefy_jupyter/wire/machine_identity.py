"""This machine's identity as a digest, for telling whether a worker runs on the server's machine.

Both ends call `machine_id_digest()`: the agent sends it in `hello.machine_id`, the control plane
compares it with its own. The raw id is never sent: the digest is a sha256 over an app-specific
prefix and the id, so it cannot be matched against the raw machine id other software reports.

Sources (seed: same-machine sharing): `/etc/machine-id` (or `/var/lib/dbus/machine-id`) on Linux,
the hardware UUID on macOS, the machine GUID on Windows. A machine with none of them gets None,
and is then never treated as the server's machine.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

_PREFIX = b"codefy-machine-id:"
LINUX_FILES = ("/etc/machine-id", "/var/lib/dbus/machine-id")


def digest_of(raw: str) -> str:
    """The digest sent for a raw machine id (hex sha256)."""
    return hashlib.sha256(_PREFIX + raw.strip().lower().encode()).hexdigest()


def raw_machine_id(files: tuple[str, ...] = LINUX_FILES) -> str | None:
    """The platform's machine id, or None when there is none."""
    if sys.platform == "darwin":
        return _macos_uuid()
    if sys.platform == "win32":
        return _windows_guid()
    for name in files:
        try:
            text = Path(name).read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            continue
        if text:
            return text
    return None


@lru_cache(maxsize=1)
def machine_id_digest() -> str | None:
    raw = raw_machine_id()
    return digest_of(raw) if raw else None


def _macos_uuid() -> str | None:
    try:
        out = subprocess.run(["ioreg", "-rd1", "-c", "IOPlatformExpertDevice"], capture_output=True,
                             text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        if "IOPlatformUUID" in line:
            return line.split("=", 1)[-1].strip().strip('"') or None
    return None


def _windows_guid() -> str | None:
    try:
        import winreg  # type: ignore[import-not-found]

        with winreg.OpenKey(winreg.HKEY_LOCAL_MACHINE, r"SOFTWARE\Microsoft\Cryptography") as key:
            value, _ = winreg.QueryValueEx(key, "MachineGuid")
            return str(value) or None
    except OSError:
        return None
