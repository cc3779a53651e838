"""Which of a peer's published addresses a rank connects to (horovod_spark/common/peer_addresses.py).

Only loopback here; tests/launcher/test_multihost_ranks.py covers real separate hosts with an
interface that reaches nothing.
"""
import socket
import time

import pytest

from horovod_spark.common import peer_addresses
from horovod_spark.common.rendezvous import PeerRecord
from horovod_spark.exceptions import ConfigError


def test_named_interfaces_are_published_in_their_order():
    assert peer_addresses.candidates({"HOROVOD_GLOO_IFACE": "lo"}) == [("127.0.0.1", "lo")]
    assert peer_addresses.candidates({"HOROVOD_ADVERTISE_ADDR": "10.1.2.3"}) == [("10.1.2.3", "HOROVOD_ADVERTISE_ADDR")]
    with pytest.raises(ConfigError, match="nosuchnic0"):
        peer_addresses.candidates({"HOROVOD_GLOO_IFACE": "nosuchnic0"})


def test_a_local_rendezvous_publishes_loopback_only():
    assert peer_addresses.candidates({"HOROVOD_RENDEZVOUS_ADDR": "127.0.0.1"}) == [("127.0.0.1", "lo")]


def test_record_round_trip_keeps_candidates_and_reads_records_without_them():
    rec = PeerRecord(3, "10.0.0.1", 1234, "hostA", [["10.0.0.1", "eth0"], ["10.1.0.1", "eth1"]])
    assert PeerRecord.decode(rec.encode()) == rec
    assert PeerRecord.decode(b'{"rank": 1, "host": "h", "port": 2, "host_id": "x"}').candidates == []


def test_the_first_candidate_that_answers_is_chosen_for_every_rank_of_that_host():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        # "hostB"'s first candidate has no route from here; its second answers.
        cands = [["255.255.255.255", "eth1"], ["localhost", "eth0"]]
        records = [PeerRecord(0, "127.0.0.1", 1, "hostA"),
                   PeerRecord(1, "255.255.255.255", port, "hostB", cands),
                   PeerRecord(2, "255.255.255.255", port, "hostB", cands)]
        chosen = peer_addresses.choose(records, 0, timeout=5)
    assert [r.host for r in chosen] == ["127.0.0.1", "localhost", "localhost"]


def test_a_host_reachable_at_none_of_its_addresses_fails_naming_it_and_what_was_tried():
    records = [PeerRecord(0, "127.0.0.1", 1, "hostA"),
               PeerRecord(1, "255.255.255.255", 9, "hostB", [["255.255.255.255", "eth1"]])]
    started = time.monotonic()
    with pytest.raises(ConnectionError) as failure:
        peer_addresses.choose(records, 0, timeout=1.5, environ={"HOROVOD_GLOO_IFACE": "eth1"})
    assert time.monotonic() - started < 3
    text = str(failure.value)
    assert "rank 0 (host hostA) cannot reach 1 other host(s) within 1.5 s" in text
    assert "host hostB (ranks 1): tried 255.255.255.255 (eth1): Network is unreachable" in text
    assert "HOROVOD_GLOO_IFACE=eth1" in text


def test_hosts_told_apart_by_name_on_one_machine_reach_each_other_over_loopback():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        records = [PeerRecord(0, "127.0.0.1", 1, "host0", [["127.0.0.1", "lo"]]),
                   PeerRecord(1, "127.0.0.1", listener.getsockname()[1], "host1", [["127.0.0.1", "lo"]])]
        assert peer_addresses.choose(records, 0, timeout=5) == records


def test_ranks_on_one_host_probe_nothing():
    records = [PeerRecord(0, "a", 1, "h"), PeerRecord(1, "b", 2, "h")]
    assert peer_addresses.choose(records, 1, timeout=0.1) == records
