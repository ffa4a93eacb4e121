"""How the agent trusts the control plane (seed: TLS): https/wss with the system's CAs, a CA file
(`--ca-file`), or a pinned public key (`--pin-sha256`).

A pin is the sha256 of the server certificate's SubjectPublicKeyInfo, as curl's `--pinnedpubkey`
takes it: `sha256//<base64>` (or the bare base64, or 64 hex digits). Print it on the control plane's
machine with

    openssl x509 -in cert.pem -pubkey -noout | openssl pkey -pubin -outform der \
        | openssl dgst -sha256 -binary | base64

Pinning works in two steps, so no secret is sent before the key is checked: a first TLS handshake
(nothing sent over it) fetches the certificate and compares its key with the pin; the real connection
then trusts exactly that certificate (as its own anchor) and nothing else. A pinned key stands for
the server's identity, so the host name is not checked against the certificate then.

A token sent over plain http(s)-less WebSocket to a host that is not this machine is warned about.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import ipaddress
import logging
import socket
import ssl
from urllib.parse import urlsplit

log = logging.getLogger("codefy.agent")

PREFLIGHT_TIMEOUT_S = 15.0


class TLSSetupError(Exception):
    """A TLS option that cannot work (an unreadable CA file, a malformed pin) or a pin mismatch."""


def parse_pin(text: str) -> bytes:
    """The 32-byte digest a `--pin-sha256` value names."""
    value = text.strip()
    if value.lower().startswith("sha256//"):
        value = value[len("sha256//"):]
    hexed = value.replace(":", "")
    if len(hexed) == 64:
        try:
            return bytes.fromhex(hexed)
        except ValueError:
            pass
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 32:
        raise TLSSetupError(f"--pin-sha256 {text!r} is not a sha256 digest: give sha256//<base64> (44 characters) "
                            "or 64 hex digits")
    return raw


def _tlv(data: bytes, i: int) -> tuple[int, int, int]:
    """(tag, start of value, end of value) of the DER element at `i`."""
    if i + 2 > len(data):
        raise ValueError("truncated DER")
    tag, length = data[i], data[i + 1]
    i += 2
    if length & 0x80:
        n = length & 0x7F
        if n == 0 or n > 4 or i + n > len(data):
            raise ValueError("bad DER length")
        length = int.from_bytes(data[i:i + n], "big")
        i += n
    if i + length > len(data):
        raise ValueError("truncated DER")
    return tag, i, i + length


def spki_of(cert_der: bytes) -> bytes:
    """The SubjectPublicKeyInfo (DER, with its header) of an X.509 certificate."""
    try:
        _, cert_start, _ = _tlv(cert_der, 0)  # Certificate ::= SEQUENCE
        _, tbs_start, tbs_end = _tlv(cert_der, cert_start)  # tbsCertificate ::= SEQUENCE
        i = tbs_start
        tag, _, end = _tlv(cert_der, i)
        if tag == 0xA0:  # [0] version
            i = end
        for _ in range(5):  # serialNumber, signature, issuer, validity, subject
            _, _, i = _tlv(cert_der, i)
        tag, _, end = _tlv(cert_der, i)
        if tag != 0x30 or end > tbs_end:
            raise ValueError("no SubjectPublicKeyInfo where expected")
        return cert_der[i:end]
    except (ValueError, IndexError) as err:
        raise TLSSetupError(f"cannot read the server's certificate: {err}") from None


def pin_of(cert_der: bytes) -> bytes:
    return hashlib.sha256(spki_of(cert_der)).digest()


def describe_pin(digest: bytes) -> str:
    return "sha256//" + base64.b64encode(digest).decode()


def context(ca_file: str | None = None) -> ssl.SSLContext:
    """Verify with the system's CAs, or with `ca_file` instead."""
    try:
        return ssl.create_default_context(cafile=ca_file) if ca_file else ssl.create_default_context()
    except (OSError, ssl.SSLError) as err:
        raise TLSSetupError(f"--ca-file {ca_file}: {err}") from None


async def fetch_certificate(host: str, port: int) -> bytes:
    """The certificate the server presents (DER), from a handshake that sends nothing else."""
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    probe.check_hostname = False
    probe.verify_mode = ssl.CERT_NONE  # checked against the pin below, never trusted as such
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port, ssl=probe, server_hostname=host),
                                           PREFLIGHT_TIMEOUT_S)
    except (OSError, asyncio.TimeoutError, ssl.SSLError) as err:
        raise ConnectionError(f"TLS handshake with {host}:{port} failed: {err}") from err
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    finally:
        writer.close()
        try:
            await writer.wait_closed()
        except (OSError, ssl.SSLError):
            pass
    if not der:
        raise TLSSetupError(f"{host}:{port} presented no certificate")
    return der


async def pinned_context(host: str, port: int, pin: bytes) -> ssl.SSLContext:
    """A context that trusts only the certificate `host:port` presents now, once its key matches."""
    der = await fetch_certificate(host, port)
    found = pin_of(der)
    if found != pin:
        raise TLSSetupError(f"the control plane's public key {describe_pin(found)} does not match the pinned "
                            f"{describe_pin(pin)}: refusing to send the token")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False  # the pinned key is the identity
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN  # the server's own certificate is the anchor
    ctx.load_verify_locations(cadata=der)
    return ctx


def is_loopback_host(host: str) -> bool:
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        return all(ipaddress.ip_address(info[4][0]).is_loopback
                   for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP))
    except (OSError, ValueError):
        return False


def warn_if_plaintext(url: str, what: str = "the worker token") -> bool:
    """Log a warning when `url` is plain http/ws to another machine; True when it warned."""
    parts = urlsplit(url)
    if parts.scheme in ("http", "ws") and not is_loopback_host(parts.hostname or ""):
        log.warning("sending %s over plain %s to %s: anyone on the network path can read it; put the control plane "
                    "behind TLS (https) on untrusted networks", what, parts.scheme, parts.hostname)
        return True
    return False
