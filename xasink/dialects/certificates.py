"""What to change when a JDBC driver refuses the server's TLS certificate.

Java's own words (PKIX path building, host name verifiers) say nothing of the URL's
setting that the user must change, nor that the file must be on every executor too."""

from __future__ import annotations


def certificate_hint(ca_property: str | None, message: str) -> str | None:
    """The remedy for a driver's refusal `message` of the server's certificate, or None.
    `ca_property`: the driver's connection property naming the CA file it trusts."""
    where = f"the {ca_property} property" if ca_property else "the URL"
    if "PKIX path" in message or "valid certification path" in message:
        return (
            "The server's TLS certificate is not signed by a CA this connection trusts: "
            f"{where} must name the file of the CA that signed it (PEM), at that path on "
            "the driver and on every executor"
        )
    if "hostname" in message.lower() and (
        "could not be verified" in message or "verification failed" in message
    ):
        return (
            "The server's TLS certificate does not name the host in the URL: connect by a "
            "name or address its subjectAltName holds (turning the check off would let any "
            "server with a certificate of that CA stand in for it)"
        )
    return None
