"""Certificates for TLS: a CA, certificates it signs, PEM files (the ``cryptography`` library).

Used by ``rocket local up --secure`` (a CA per embedded cluster), ``tls.test.mode.enable``
(a throwaway self-signed certificate) and the tests. Keys are ECDSA P-256 (fast handshakes,
accepted by OpenSSL and Java 11+); certificates are X.509 v3, SHA-256 signed, with the hosts as
subject alternative names (IP addresses as ``IPAddress``, other names as ``DNSName``).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: Validity of the certificates issued here, days (the operator's cluster CA uses the same).
DEFAULT_DAYS = 365


@dataclass(frozen=True, slots=True)
class KeyPair:
    """A PEM certificate and its PEM private key (PKCS#8, unencrypted)."""

    cert_pem: bytes
    key_pem: bytes

    @property
    def serial(self) -> int:
        """The certificate's serial number."""
        return x509.load_pem_x509_certificate(self.cert_pem).serial_number


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "RocketCluster"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _san(hosts: Sequence[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def issue_ca(common_name: str = "RocketCluster CA", days: int = DEFAULT_DAYS) -> KeyPair:
    """A self-signed CA certificate (``BasicConstraints(ca=True)``, key usage cert/CRL signing)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name)).issuer_name(_name(common_name))
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                     crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def issue_cert(ca: KeyPair, common_name: str, hosts: Sequence[str], days: int = DEFAULT_DAYS) -> KeyPair:
    """A certificate signed by ``ca`` for ``hosts`` (SAN), usable by servers and clients alike.

    Raises ``ValueError`` when ``ca`` does not load.
    """
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key must be an EC key (issue_ca makes one)")
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name)).issuer_name(ca_cert.subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_san(hosts), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                       critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def self_signed(hosts: Sequence[str], days: int = DEFAULT_DAYS) -> tuple[bytes, bytes]:
    """``(cert_pem, key_pem)`` of a throwaway self-signed certificate for ``hosts`` (test mode)."""
    pair = issue_cert(issue_ca("RocketCluster test mode"), hosts[0] if hosts else "localhost", hosts, days)
    return pair.cert_pem, pair.key_pem


def expires_within(cert_pem: bytes, days: float) -> bool:
    """True when the PEM certificate's ``notAfter`` is less than ``days`` days away (or past), or it
    does not load."""
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError:
        return True
    left = cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC)
    return left < datetime.timedelta(days=days)


def write_pem(path: Path, data: bytes, *, private: bool = False) -> None:
    """Write ``data`` to ``path`` atomically (a temporary file renamed over it, so a reader sees the
    old file or the new one, never half of one); mode 0600 when ``private``. Raises ``OSError``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def write_pair(directory: Path, name: str, pair: KeyPair) -> tuple[Path, Path]:
    """Write ``<name>.pem`` and ``<name>.key`` (0600) in ``directory``; returns their paths."""
    cert_path, key_path = directory / f"{name}.pem", directory / f"{name}.key"
    write_pem(cert_path, pair.cert_pem)
    write_pem(key_path, pair.key_pem, private=True)
    return cert_path, key_path
