"""The operator-issued cluster CA and server certificates (``cryptography``; pure but for key generation).

One CA per RocketCluster signs one server certificate whose subject alternative names cover every
NameServer, broker and controller name (:func:`rocket_operator.security.server_dns_names`). Keys are
ECDSA P-256 (fast to make; Java's and OpenSSL's TLS take them). Lifetimes, as Strimzi's cluster CA:

* the CA is valid :data:`CA_VALIDITY` (365 days) and renewed :data:`CA_RENEW_BEFORE` (30 days)
  before it expires: a new key and certificate, the old certificate staying in the trust bundle
  until it expires, so that clients trusting the bundle accept both;
* the server certificate is valid at most as long as its CA and renewed :data:`SERVER_RENEW_BEFORE`
  (23 days) before it expires, a week after a CA renewal put the new CA into every trust bundle,
  or at once when its names change or its CA is no longer trusted. It is always signed by the
  newest CA.

:func:`plan` decides from the three Secrets' data (base64-decoded bytes) and the time what to
write; the servers reload certificate files when they change, so a renewal restarts nothing.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from rocket_operator.security import CA_CERT_KEY, CA_KEY_KEY, TLS_CERT_KEY, TLS_KEY_KEY

CA_VALIDITY = datetime.timedelta(days=365)
CA_RENEW_BEFORE = datetime.timedelta(days=30)
SERVER_VALIDITY = datetime.timedelta(days=365)
SERVER_RENEW_BEFORE = datetime.timedelta(days=23)
#: Certificates start this long before "now" (clocks of other machines may lag).
BACKDATE = datetime.timedelta(minutes=5)


class CertError(ValueError):
    """A certificate or key in a Secret that does not parse."""


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def load_certs(pem: bytes) -> list[x509.Certificate]:
    """Every certificate of a PEM bundle (empty for empty input). Raises :class:`CertError`."""
    if not pem.strip():
        return []
    try:
        return x509.load_pem_x509_certificates(pem)
    except ValueError as exc:
        raise CertError(f"not a PEM certificate bundle: {exc}") from None


def not_after(cert: x509.Certificate) -> datetime.datetime:
    """The certificate's end of validity (UTC, aware)."""
    return cert.not_valid_after_utc


def new_ca(common_name: str, now: datetime.datetime) -> tuple[bytes, bytes]:
    """A self-signed CA, valid from ``now`` (less :data:`BACKDATE`) for :data:`CA_VALIDITY`: ``(cert
    PEM, key PEM)``. Basic constraints CA with path length 0; key usage certificate and CRL signing."""
    key = _key()
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "rocket.dev"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (x509.CertificateBuilder()
            .subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE).not_valid_after(now + CA_VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return _cert_pem(cert), _key_pem(key)


def _san(name: str) -> x509.GeneralName:
    """A subject alternative name: an IP address SAN for an IP literal, else a DNS name."""
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def new_server_cert(ca_cert_pem: bytes, ca_key_pem: bytes, dns_names: Iterable[str], now: datetime.datetime
                    ) -> tuple[bytes, bytes]:
    """A server certificate for ``dns_names`` (the first is the common name) signed by the CA:
    ``(cert PEM, key PEM)``, valid for :data:`SERVER_VALIDITY` but never past the CA. Extended key
    usage server and client authentication (brokers are clients of NameServers and masters).
    Raises :class:`CertError` for a CA that does not parse."""
    try:
        ca = x509.load_pem_x509_certificate(ca_cert_pem)
        ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    except (ValueError, TypeError) as exc:
        raise CertError(f"the cluster CA does not parse: {exc}") from None
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise CertError("the cluster CA key is not an ECDSA key")
    dns = list(dict.fromkeys(dns_names))
    key = _key()
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "rocket.dev"),
                                     x509.NameAttribute(NameOID.COMMON_NAME, dns[0][:64])]))
            .issuer_name(ca.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE).not_valid_after(min(now + SERVER_VALIDITY, not_after(ca)))
            .add_extension(x509.SubjectAlternativeName([_san(d) for d in dns]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return _cert_pem(cert), _key_pem(key)


def dns_names_of(cert: x509.Certificate) -> list[str]:
    """The DNS subject alternative names of a certificate (empty when it has none)."""
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return []
    return list(ext.value.get_values_for_type(x509.DNSName))


def issued_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    """Whether ``ca`` signed ``cert`` (issuer name and signature)."""
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


@dataclass(slots=True)
class TlsPlan:
    """What :func:`plan` decided: the new data of each Secret (None = keep it as it is), the trust
    bundle, the validity ends and ``events`` (``(reason, message)``) of what changed."""

    ca: dict[str, bytes] | None = None
    ca_cert: dict[str, bytes] | None = None
    server: dict[str, bytes] | None = None
    bundle: bytes = b""
    ca_not_after: datetime.datetime | None = None
    server_not_after: datetime.datetime | None = None
    events: list[tuple[str, str]] = field(default_factory=list)


def _safe_certs(pem: bytes | None) -> list[x509.Certificate]:
    try:
        return load_certs(pem or b"")
    except CertError:
        return []


def plan(cluster: str, ca_data: Mapping[str, bytes] | None, ca_cert_data: Mapping[str, bytes] | None,
         server_data: Mapping[str, bytes] | None, dns_names: list[str], now: datetime.datetime) -> TlsPlan:
    """Decide the cluster CA, trust bundle and server certificate (module doc) from the current
    Secret data (None: the Secret does not exist; unparsable content is replaced) at ``now``."""
    out = TlsPlan()
    ca_certs = _safe_certs((ca_data or {}).get(CA_CERT_KEY))
    ca_key = (ca_data or {}).get(CA_KEY_KEY)
    newest = ca_certs[0] if ca_certs and ca_key else None
    if newest is None or now >= not_after(newest) - CA_RENEW_BEFORE:
        cert_pem, key_pem = new_ca(f"{cluster} cluster CA", now)
        out.ca = {CA_CERT_KEY: cert_pem, CA_KEY_KEY: key_pem}
        out.events.append(("ClusterCaRenewed" if newest is not None else "ClusterCaCreated",
                           f"cluster CA {'renewed' if newest is not None else 'created'}, valid until "
                           f"{not_after(load_certs(cert_pem)[0]):%Y-%m-%d}"))
        newest, ca_key = load_certs(cert_pem)[0], key_pem
    assert ca_key is not None
    # trust bundle: the newest CA first, then every older one still valid
    trusted = [newest] + [c for c in _safe_certs((ca_cert_data or {}).get(CA_CERT_KEY)) + ca_certs
                          if c != newest and not_after(c) > now]
    unique: list[x509.Certificate] = []
    for cert in trusted:
        if cert not in unique:
            unique.append(cert)
    out.bundle = b"".join(_cert_pem(c) for c in unique)
    out.ca_not_after = not_after(newest)
    if (ca_cert_data or {}).get(CA_CERT_KEY) != out.bundle:
        out.ca_cert = {CA_CERT_KEY: out.bundle}
    server_certs = _safe_certs((server_data or {}).get(TLS_CERT_KEY))
    server = server_certs[0] if server_certs and (server_data or {}).get(TLS_KEY_KEY) else None
    reason = None
    if server is None:
        reason = "ServerCertificateCreated"
    elif sorted(dns_names_of(server)) != sorted(set(dns_names)):
        reason = "ServerCertificateNamesChanged"
    elif not any(issued_by(server, ca) for ca in unique):
        reason = "ServerCertificateReissued"
    elif now >= not_after(server) - SERVER_RENEW_BEFORE:
        reason = "ServerCertificateRenewed"
    if reason is not None:
        cert_pem, key_pem = new_server_cert(_cert_pem(newest), ca_key, dns_names, now)
        out.server = {TLS_CERT_KEY: cert_pem, TLS_KEY_KEY: key_pem, CA_CERT_KEY: out.bundle}
        server = load_certs(cert_pem)[0]
        out.events.append((reason, f"server certificate issued by the cluster CA, valid until "
                                   f"{not_after(server):%Y-%m-%d}"))
    elif (server_data or {}).get(CA_CERT_KEY) != out.bundle:
        out.server = {**dict(server_data or {}), CA_CERT_KEY: out.bundle}
    assert server is not None
    out.server_not_after = not_after(server)
    return out
