"""HOROVOD_SPARK_TLS=1: the job's Python services speak TLS end to end (local launcher and Spark),
plain clients are refused, a user's certificate is used when given, and a man in the middle with
its own certificate cannot relay the secret-keyed handshake."""
import os
import select
import socket
import ssl
import subprocess
import sys
import threading
import time

import cloudpickle
import pytest

import horovod_spark
from horovod_spark.common import wire, wire_tls
from horovod_spark.common.kv_client import KVClient, KVError
from horovod_spark.common.kv_server import KVStoreServer
from horovod_spark.launcher.local_job import run_local

pytestmark = pytest.mark.timeout(300)
# The ranks' function travels by value: executors do not import this test module.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _probe_service():
    """From inside a rank: is the rendezvous service TLS, and does a plain client get in?"""
    import torch

    import horovod_spark.torch as hvd
    hvd.init()
    total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum).item()
    addr, port = os.environ["HOROVOD_RENDEZVOUS_ADDR"], int(os.environ["HOROVOD_RENDEZVOUS_PORT"])
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with context.wrap_socket(socket.create_connection((addr, port), timeout=10)) as tls:
        version = tls.version()
    key = bytes.fromhex(os.environ["HOROVOD_SECRET_KEY"])
    plain = KVClient(addr, port, key, tls=False)
    try:
        plain.request("ping")
        plain_outcome = "served"
    except Exception as exc:
        plain_outcome = type(exc).__name__
    hvd.shutdown()
    # The secret is in the environment, never on a command line (ours or any process's we can see).
    cmdlines = []
    for pid in os.listdir("/proc"):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmdlines.append(f.read())
        except (OSError, ValueError):
            pass
    on_a_command_line = any(os.environ["HOROVOD_SECRET_KEY"].encode() in c for c in cmdlines)
    return {"sum": total, "tls_env": os.environ.get("HOROVOD_SPARK_TLS"), "version": version,
            "plain": plain_outcome, "secret_on_a_command_line": on_a_command_line}


def _check(results):
    for r in results:
        assert r["sum"] == 3.0 and r["tls_env"] == "1"
        assert r["version"] in ("TLSv1.2", "TLSv1.3")
        assert r["plain"] != "served"
        assert r["secret_on_a_command_line"] is False


def test_local_launcher_job_over_tls():
    _check(run_local(_probe_service, num_proc=2, env={"HOROVOD_SPARK_TLS": "1"}))


def test_spark_run_over_tls(spark, monkeypatch):
    monkeypatch.setenv("HOROVOD_SPARK_TLS", "1")
    _check(horovod_spark.run(_probe_service, num_proc=2, verbose=0))


def _openssl_pair(tmp_path):
    cert, key = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=user cert"],
                   check=True, capture_output=True)
    return cert, key


def test_user_certificate_is_used(tmp_path):
    cert, key = _openssl_pair(tmp_path)
    secret = wire.make_secret()
    tls = wire_tls.ServerTLS.from_env({"HOROVOD_SPARK_TLS": "1", "HOROVOD_SPARK_TLS_CERT": cert,
                                       "HOROVOD_SPARK_TLS_KEY": key})
    with KVStoreServer(secret, host="127.0.0.1", tls=tls) as srv:
        with wire_tls.wrap_client(socket.create_connection(("127.0.0.1", srv.port)), 5) as s:
            with open(cert) as f:
                assert s.getpeercert(binary_form=True) == ssl.PEM_cert_to_DER_cert(f.read())
        with KVClient("127.0.0.1", srv.port, secret, tls=True) as c:
            c.put("s", "k", b"over tls")
            assert c.get("s", "k", timeout=1) == b"over tls"
    with pytest.raises(Exception, match="HOROVOD_SPARK_TLS_CERT and HOROVOD_SPARK_TLS_KEY go together"):
        wire_tls.ServerTLS.from_env({"HOROVOD_SPARK_TLS": "1", "HOROVOD_SPARK_TLS_CERT": cert})


def test_tls_man_in_the_middle_cannot_relay_the_handshake(caplog):
    secret = wire.make_secret()
    with KVStoreServer(secret, host="127.0.0.1", tls=wire_tls.ServerTLS()) as srv:
        own = wire_tls.ServerTLS()  # the attacker's certificate: any other one
        listener = socket.create_server(("127.0.0.1", 0))

        def relay():
            client, _ = listener.accept()
            inside = own.wrap(client, 10)
            outside = wire_tls.wrap_client(socket.create_connection(("127.0.0.1", srv.port)), 10)
            _pump_both(inside, outside, 60)

        threading.Thread(target=relay, daemon=True).start()
        with pytest.raises(KVError, match="failed to prove it holds the job's secret"):
            KVClient("127.0.0.1", listener.getsockname()[1], secret, tls=True).request("ping")
        listener.close()
        with KVClient("127.0.0.1", srv.port, secret, tls=True) as c:
            assert c.request("ping") == "pong"


def _pump_both(a, b, seconds):
    """Relay both directions from one thread: an SSL socket must not be read in one thread while
    another writes to it (OpenSSL's state is not thread-safe), which could lose a record."""
    deadline = time.monotonic() + seconds
    for s in (a, b):
        s.settimeout(0.2)
    try:
        while time.monotonic() < deadline:
            readable, _, _ = select.select([a, b], [], [], 0.2)
            for src in {s for s in (a, b) if s in readable or s.pending()}:
                try:
                    data = src.recv(65536)
                except (TimeoutError, socket.timeout):
                    continue  # a partial record, or only TLS housekeeping so far
                if not data:
                    return
                (b if src is a else a).sendall(data)
    except (OSError, ValueError):
        pass
    finally:
        for s in (a, b):
            try:
                s.close()
            except OSError:
                pass
