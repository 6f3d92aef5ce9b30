"""Certificates and keys for one local cluster: a CA, the API server's serving cert, client certs, SA key.

ECDSA P-256 for TLS (fast to generate, accepted by Go, kubectl and Python's ssl); RSA for the
service-account signing key because RS256 is what every token consumer accepts.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=365)
# Clocks of processes started a moment later must already see the cert as valid.
BACKDATE = datetime.timedelta(hours=1)

API_SERVER_DNS_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)


@dataclass(frozen=True)
class CertKey:
    cert_pem: bytes
    key_pem: bytes


@dataclass(frozen=True)
class PkiFiles:
    """Where `write_cluster_pki` put everything (all PEM)."""

    ca_cert: Path
    ca_key: Path
    apiserver_cert: Path
    apiserver_key: Path
    sa_key: Path
    sa_pub: Path
    clients: dict[str, tuple[Path, Path]]  # client name -> (cert, key)


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attrs)


def _builder(subject: x509.Name, issuer: x509.Name, public_key) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + VALIDITY)
    )


def new_ca(common_name: str) -> CertKey:
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name(common_name)
    cert = (
        _builder(name, name, key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return CertKey(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def _leaf(
    ca: CertKey,
    subject: x509.Name,
    usages: list[x509.ObjectIdentifier],
    san: x509.SubjectAlternativeName | None,
) -> CertKey:
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TypeError("the CA key must be an ECDSA key (made by new_ca)")
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        _builder(subject, ca_cert.subject, key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if san is not None:
        builder = builder.add_extension(san, critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return CertKey(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def serving_cert(ca: CertKey, common_name: str, dns_names: tuple[str, ...], ips: tuple[str, ...]) -> CertKey:
    san = x509.SubjectAlternativeName(
        [x509.DNSName(name) for name in dns_names] + [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    )
    return _leaf(ca, _name(common_name), [ExtendedKeyUsageOID.SERVER_AUTH], san)


def client_cert(ca: CertKey, common_name: str, organizations: tuple[str, ...] = ()) -> CertKey:
    """The API server takes the user from CN and the groups from O."""
    return _leaf(ca, _name(common_name, organizations), [ExtendedKeyUsageOID.CLIENT_AUTH], None)


def service_account_key() -> tuple[bytes, bytes]:
    """(private key PEM, public key PEM) for signing service-account tokens; no certificate needed."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return _key_pem(key), public


def _write(path: Path, data: bytes, private: bool = False) -> Path:
    path.write_bytes(data)
    if private:
        path.chmod(0o600)
    return path


def write_cluster_pki(
    directory: Path,
    *,
    api_ips: tuple[str, ...],
    clients: dict[str, tuple[str, tuple[str, ...]]],
) -> PkiFiles:
    """Create a fresh CA and everything signed by it under `directory`.

    api_ips: the IP SANs of the API server (loopback, bridge gateway, the `kubernetes` Service IP).
    clients: file stem -> (CN, groups) for each client certificate.
    """
    directory.mkdir(parents=True, exist_ok=True)
    ca = new_ca("mwms-local-ca")
    api = serving_cert(ca, "kube-apiserver", API_SERVER_DNS_NAMES, api_ips)
    sa_private, sa_public = service_account_key()
    client_paths = {}
    for stem, (common_name, groups) in clients.items():
        pair = client_cert(ca, common_name, groups)
        client_paths[stem] = (
            _write(directory / f"{stem}.crt", pair.cert_pem),
            _write(directory / f"{stem}.key", pair.key_pem, private=True),
        )
    return PkiFiles(
        ca_cert=_write(directory / "ca.crt", ca.cert_pem),
        ca_key=_write(directory / "ca.key", ca.key_pem, private=True),
        apiserver_cert=_write(directory / "apiserver.crt", api.cert_pem),
        apiserver_key=_write(directory / "apiserver.key", api.key_pem, private=True),
        sa_key=_write(directory / "sa.key", sa_private, private=True),
        sa_pub=_write(directory / "sa.pub", sa_public),
        clients=client_paths,
    )
