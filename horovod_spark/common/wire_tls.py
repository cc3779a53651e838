"""Optional TLS for the job's Python services (KV/rendezvous service, Spark driver service).

Turned on with HOROVOD_SPARK_TLS=1. The server uses the certificate and key named by
HOROVOD_SPARK_TLS_CERT and HOROVOD_SPARK_TLS_KEY, or, when those are unset, a self-signed
certificate made for the job (``openssl req``) whose files live only while it is loaded.

Clients do not check the certificate against a CA: the secret-keyed handshake of
``horovod_spark.common.wire`` covers the hash of the certificate the client saw, so a man in the
middle showing any other certificate fails the handshake, and no CA or fingerprint has to be
distributed to the executors. TLS adds confidentiality; authentication comes from the secret.
"""
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
from typing import Optional

from horovod_spark.common import config
from horovod_spark.exceptions import ConfigError

_OPENSSL_TIMEOUT_S = 60.0


def enabled(environ=None) -> bool:
    return bool(config.SPARK_TLS.get(environ))


def _self_signed(directory: str) -> (str, str):
    openssl = shutil.which("openssl")
    if openssl is None:
        raise ConfigError("%s=1 without %s/%s needs the openssl command to make the job's certificate, and it is "
                          "not on PATH; install openssl or give a certificate and key"
                          % (config.SPARK_TLS.name, config.SPARK_TLS_CERT.name, config.SPARK_TLS_KEY.name))
    cert, key = os.path.join(directory, "cert.pem"), os.path.join(directory, "key.pem")
    cmd = [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
           "-keyout", key, "-out", cert, "-days", "7", "-subj", "/CN=horovod_spark job"]
    done = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=_OPENSSL_TIMEOUT_S)
    if done.returncode != 0:
        raise ConfigError("making the job's TLS certificate failed (%s): %s; give one with %s and %s"
                          % (" ".join(cmd[:3]), done.stdout.decode(errors="replace").strip()[-500:],
                             config.SPARK_TLS_CERT.name, config.SPARK_TLS_KEY.name))
    return cert, key


class ServerTLS:
    """The server side: ``wrap(sock, timeout)`` runs the TLS handshake on an accepted socket."""

    def __init__(self, cert_path: Optional[str] = None, key_path: Optional[str] = None):
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        if (cert_path is None) != (key_path is None):
            raise ConfigError("%s and %s go together: give both, or neither for a certificate made per job"
                              % (config.SPARK_TLS_CERT.name, config.SPARK_TLS_KEY.name))
        if cert_path is None:
            with tempfile.TemporaryDirectory(prefix="horovod_spark-tls-") as directory:
                os.chmod(directory, 0o700)
                cert_path, key_path = _self_signed(directory)
                self._load(cert_path, key_path)
        else:
            self._load(cert_path, key_path)

    def _load(self, cert_path: str, key_path: str) -> None:
        try:
            self.context.load_cert_chain(cert_path, key_path)
            with open(cert_path) as f:
                self.certificate_der = ssl.PEM_cert_to_DER_cert(f.read())
        except (OSError, ValueError, ssl.SSLError) as exc:
            raise ConfigError("cannot load the TLS certificate %s and key %s: %s; check %s and %s"
                              % (cert_path, key_path, exc, config.SPARK_TLS_CERT.name,
                                 config.SPARK_TLS_KEY.name)) from None

    @classmethod
    def from_env(cls, environ=None) -> Optional["ServerTLS"]:
        """A ServerTLS when HOROVOD_SPARK_TLS is on, else None."""
        if not enabled(environ):
            return None
        return cls(config.SPARK_TLS_CERT.get(environ), config.SPARK_TLS_KEY.get(environ))

    def wrap(self, sock: socket.socket, timeout: float) -> ssl.SSLSocket:
        sock.settimeout(timeout)
        tls = self.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        tls.do_handshake()
        return tls


def client_context() -> ssl.SSLContext:
    """A client context that takes any certificate: the handshake binds it to the secret instead."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def wrap_client(sock: socket.socket, timeout: float) -> ssl.SSLSocket:
    sock.settimeout(timeout)
    return client_context().wrap_socket(sock, server_side=False)
