"""A throwaway certificate authority and the server certificates it signs, for the TLS tests.

Made with `cryptography` in the test's own temporary folder: no file of the machine's trust
store is read or changed, so a test proves only what the CA file it names makes true."""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class ServerCertificate:
    """A server's certificate and key, and the CA file that vouches for it."""

    ca: Path
    cert: Path
    key: Path


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _write_key(key: rsa.RSAPrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)  # PostgreSQL refuses a key others may read


def _write_cert(cert: x509.Certificate, path: Path) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    path.chmod(0o644)


def issue(
    folder: Path, name: str, hosts: tuple[str, ...] = ("127.0.0.1", "localhost")
) -> ServerCertificate:
    """A new CA called `name`, and a server certificate it signs for `hosts` (IP addresses
    and DNS names in subjectAltName, where hostname checks look), all in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    valid = (now - datetime.timedelta(days=1), now + datetime.timedelta(days=30))
    ca_key = _key()
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name(f"{name} CA"))
        .issuer_name(_name(f"{name} CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid[0])
        .not_valid_after(valid[1])
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    server_key = _key()
    alt_names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            alt_names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            alt_names.append(x509.DNSName(host))
    server_cert = (
        x509.CertificateBuilder()
        .subject_name(_name(hosts[0]))
        .issuer_name(ca_cert.subject)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid[0])
        .not_valid_after(valid[1])
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    made = ServerCertificate(
        folder / f"{name}-ca.pem", folder / f"{name}.pem", folder / f"{name}.key"
    )
    _write_cert(ca_cert, made.ca)
    _write_cert(server_cert, made.cert)
    _write_key(server_key, made.key)
    return made


def hand_to(made: ServerCertificate, uid: int, gid: int) -> None:
    """Give a server that runs as another user its key and certificate (the key stays 0600)."""
    for path in (made.cert, made.key, made.ca):
        os.chown(path, uid, gid)
    os.chown(made.key.parent, uid, gid)
