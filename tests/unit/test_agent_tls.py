"""The agent's trust in the control plane: pins (parsing, the key of a real certificate made by
openssl), a pinned connection to a real TLS server, CA files, and plain-HTTP warnings."""

from __future__ import annotations

import asyncio
import base64
import logging
import shutil
import ssl
import subprocess
from pathlib import Path

import pytest

from codefy_jupyter.agent import tls

needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


def make_cert(folder: Path, name: str = "server") -> tuple[Path, Path]:
    cert, key = folder / f"{name}.pem", folder / f"{name}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "2", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True)
    return cert, key


def openssl_pin(cert: Path) -> str:
    """The pin as the README tells operators to print it."""
    pub = subprocess.run(["openssl", "x509", "-in", str(cert), "-pubkey", "-noout"], check=True, capture_output=True).stdout
    der = subprocess.run(["openssl", "pkey", "-pubin", "-outform", "der"], input=pub, check=True,
                         capture_output=True).stdout
    digest = subprocess.run(["openssl", "dgst", "-sha256", "-binary"], input=der, check=True, capture_output=True).stdout
    return base64.b64encode(digest).decode()


def test_pin_spellings():
    digest = bytes(range(32))
    b64 = base64.b64encode(digest).decode()
    assert tls.parse_pin(f"sha256//{b64}") == digest
    assert tls.parse_pin(b64) == digest
    assert tls.parse_pin(digest.hex()) == digest
    assert tls.parse_pin(":".join(f"{b:02X}" for b in digest)) == digest
    for bad in ("", "sha256//short", "zz" * 32, base64.b64encode(b"x" * 31).decode()):
        with pytest.raises(tls.TLSSetupError, match="--pin-sha256"):
            tls.parse_pin(bad)


@needs_openssl
def test_the_key_pin_of_a_certificate_matches_openssls(tmp_path):
    cert, _ = make_cert(tmp_path)
    der = ssl.PEM_cert_to_DER_cert(cert.read_text())
    assert tls.describe_pin(tls.pin_of(der)) == "sha256//" + openssl_pin(cert)
    with pytest.raises(tls.TLSSetupError):
        tls.spki_of(der[:40])


@needs_openssl
def test_a_pinned_connection_trusts_that_key_only(tmp_path):
    cert, key = make_cert(tmp_path)
    other, _ = make_cert(tmp_path, "other")
    served = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    served.load_cert_chain(cert, key)

    async def scenario() -> None:
        async def answer(reader, writer):
            try:
                writer.write(b"hello\n")
                await writer.drain()
            except (ConnectionError, ssl.SSLError):
                pass
            writer.close()

        server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=served)
        port = server.sockets[0].getsockname()[1]
        try:
            right = tls.parse_pin(openssl_pin(cert))
            ctx = await tls.pinned_context("127.0.0.1", port, right)
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="127.0.0.1")
            assert await reader.readline() == b"hello\n"
            writer.close()
            wrong = tls.parse_pin(openssl_pin(other))
            with pytest.raises(tls.TLSSetupError, match="does not match the pinned"):
                await tls.pinned_context("127.0.0.1", port, wrong)
            # Without a pin or a CA file, the system's CAs do not know this self-signed certificate.
            with pytest.raises(ssl.SSLCertVerificationError):
                await asyncio.open_connection("127.0.0.1", port, ssl=tls.context(), server_hostname="localhost")
            # With it as the CA file, it verifies (host name included).
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls.context(str(cert)),
                                                           server_hostname="localhost")
            assert await reader.readline() == b"hello\n"
            writer.close()
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(scenario())


def test_a_missing_ca_file_is_a_clear_error(tmp_path):
    with pytest.raises(tls.TLSSetupError, match="--ca-file"):
        tls.context(str(tmp_path / "nope.pem"))


def test_plain_http_to_another_machine_is_warned(caplog):
    with caplog.at_level(logging.WARNING, logger="codefy.agent"):
        assert tls.warn_if_plaintext("http://10.1.2.3:8888/") is True
        assert not tls.warn_if_plaintext("http://127.0.0.1:8888/")
        assert not tls.warn_if_plaintext("http://localhost:8888/")
        assert not tls.warn_if_plaintext("https://10.1.2.3/")
    assert [r.message for r in caplog.records if "plain http" in r.message] != []
