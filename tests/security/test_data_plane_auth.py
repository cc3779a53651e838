"""HOROVOD_SPARK_DATA_PLANE_AUTH: two ranks over TCP (shared memory off) through a relay that can
flip one byte of the data channel after the handshake. With the setting on, the tampered
allreduce fails on both ranks within seconds, naming the link; with it off, the same relay
silently corrupts the result (so the relay does reach the data); untampered, every dtype and size
comes back exact through authenticated frames; ranks that disagree on the setting fail init."""
import json
import os
import subprocess
import sys

import pytest
from support.peer_port import kv_service, record_of
from support.tampering_relay import CONTROL_CHANNEL, DATA_CHANNEL, TamperingRelay

from horovod_spark.launcher.local_job import rank_environment

pytestmark = pytest.mark.timeout(300)

# Each rank sums tensors whose exact totals it knows; prints one line per tensor, or the error.
_SCRIPT = """
import sys, time
import torch
import horovod_spark.torch as hvd
from horovod_spark.exceptions import HorovodInternalError
hvd.init()
r = hvd.rank()
cases = [(d, n) for d in sys.argv[1].split(",") for n in map(int, sys.argv[2].split(","))]
for name, n in cases:
    dtype = getattr(torch, name)
    x = (torch.arange(n, dtype=torch.int64) % 61 + r * 7).to(dtype)
    want = (torch.arange(n, dtype=torch.int64) % 61 * 2 + 7).to(dtype)
    t0 = time.monotonic()
    try:
        got = hvd.allreduce(x, op=hvd.Sum, name="%s.%d" % (name, n))
    except HorovodInternalError as exc:
        print("FAILED %.2f %s" % (time.monotonic() - t0, exc), flush=True)
        sys.exit(3)
    print("%s %s %d" % ("EXACT" if torch.equal(got, want) else "WRONG", name, n), flush=True)
hvd.shutdown()
"""

_TAMPERED = ("float32", "262144")  # 1 MiB: 16 frames, the flip lands in the first
_FLIP_AT = 5000


def _start(rank, server, key, scope, auth, cases):
    env = rank_environment(rank, 2, server.port, key, scope, dict(os.environ))
    env.update({"HOROVOD_SPARK_TLS": "0", "HOROVOD_SHM_DISABLE": "1", "HOROVOD_START_TIMEOUT": "60",
                "HOROVOD_SPARK_DATA_PLANE_AUTH": auth})
    return subprocess.Popen([sys.executable, "-c", _SCRIPT, *cases], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _run_pair(auth0, auth1, cases, flip_at=None, channel=DATA_CHANNEL):
    """Rank 0, then rank 1 reaching rank 0 only through the relay; returns each rank's
    (exit code, stdout, stderr) and the relay."""
    with kv_service("dataplane") as (server, key, scope):
        rank0 = _start(0, server, key, scope, auth0, cases)
        relay = None
        try:
            record = record_of(server, scope, 0)
            relay = TamperingRelay(record["port"], flip_at, channel)
            # Rank 1 reads rank 0's address from the rendezvous: point it at the relay.
            server.put(scope + ".init.0", "rank.0", json.dumps(dict(record, port=relay.port)).encode())
            rank1 = _start(1, server, key, scope, auth1, cases)
            out1, err1 = rank1.communicate(timeout=120)
            out0, err0 = rank0.communicate(timeout=60)
        finally:
            if rank0.poll() is None:
                rank0.kill()
                rank0.communicate()
            if relay is not None:
                relay.close()
    return [(rank0.returncode, out0, err0), (rank1.returncode, out1, err1)], relay


@pytest.mark.parametrize("channel,flip_at", [(DATA_CHANNEL, _FLIP_AT), (CONTROL_CHANNEL, 10)],
                         ids=["data", "control"])
def test_a_tampered_frame_fails_the_collective_on_both_ranks_naming_the_link(channel, flip_at):
    ranks, relay = _run_pair("on", "on", _TAMPERED, flip_at=flip_at, channel=channel)
    assert relay.flipped.is_set()
    for rank, (code, out, err) in enumerate(ranks):
        assert code == 3, "rank %d: exit %s\n%s\n%s" % (rank, code, out, err)
        seconds, message = out.split("FAILED ", 1)[1].split(" ", 1)
        assert float(seconds) < 15, out
        assert "altered in transit" in message, message
        assert "from rank 1" in message and "to rank 0" in message and "127.0.0.1" in message, message
        assert ("data channel" if channel == DATA_CHANNEL else "control channel") in message, message


def test_without_the_setting_the_same_relay_corrupts_the_result_silently():
    ranks, relay = _run_pair("off", "off", _TAMPERED, flip_at=_FLIP_AT)
    assert relay.flipped.is_set()
    outs = [out for _, out, _ in ranks]
    assert all(code == 0 for code, _, _ in ranks), ranks
    assert any("WRONG float32 262144" in out for out in outs), outs


def test_authenticated_frames_carry_every_dtype_and_size_exactly():
    cases = ("float32,float64,float16,int32,int64,uint8", "1,3,1001,65537,300001")
    ranks, relay = _run_pair("on", "on", cases)
    assert not relay.flipped.is_set()
    for rank, (code, out, err) in enumerate(ranks):
        assert code == 0, "rank %d: exit %s\n%s\n%s" % (rank, code, out, err)
        assert out.count("EXACT ") == 30 and "WRONG" not in out, out


def test_ranks_that_disagree_on_the_setting_fail_init_naming_it():
    ranks, _ = _run_pair("on", "off", ("float32", "8"))
    for rank, (code, out, err) in enumerate(ranks):
        assert code != 0, "rank %d: exit 0\n%s" % (rank, out)
        assert "HOROVOD_SPARK_DATA_PLANE_AUTH" in err, "rank %d:\n%s" % (rank, err)
