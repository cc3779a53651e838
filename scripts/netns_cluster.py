"""Namespace hosts (and optionally a Spark standalone cluster on them) for manual use; needs root.

    python scripts/netns_cluster.py up --hosts 3 [--rate 10gbit] [--spark]   # build, print how to use
    python scripts/netns_cluster.py down                                    # remove everything again
    python scripts/netns_cluster.py exec 1 -- hostname                      # run a command on host 1

``up`` builds hosts mh0..mhN-1 (tests/support/netns_hosts.py: addresses 10.77.0.1.., this machine
at 10.77.0.254 on the bridge) and leaves them in place; with ``--spark`` it also starts a master on
mh0 and a 2-core worker per host, which keep running until ``down``. ``down`` removes namespaces,
links, /etc/hosts lines and every process still running in the hosts, also after a crash.
"""
import argparse
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests"))
sys.path.insert(0, REPO)

from support.netns_hosts import ROOT_ADDR, NetnsHosts, unavailable_reason  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up")
    up.add_argument("--hosts", type=int, default=3)
    up.add_argument("--rate", default=None, help="tc rate of every host link, e.g. 10gbit (default unlimited)")
    up.add_argument("--spark", action="store_true", help="also start a standalone master and one worker per host")
    sub.add_parser("down")
    ex = sub.add_parser("exec")
    ex.add_argument("host", type=int)
    ex.add_argument("argv", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    reason = unavailable_reason()
    if reason:
        sys.exit("netns_cluster: " + reason)
    if args.cmd == "down":
        NetnsHosts(1).teardown()  # removes whatever the prefix's earlier runs left
        print("removed the namespace hosts")
        return
    if args.cmd == "exec":
        argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
        os.execvp("ip", NetnsHosts(args.host + 1).command(args.host, argv))
    hosts = NetnsHosts(args.hosts, link_rate=args.rate).setup()
    hosts._procs = []  # left running on purpose; `down` ends them
    print("hosts: %s at %s; this machine is %s on the bridge"
          % (", ".join(hosts.names), ", ".join(hosts.addrs), ROOT_ADDR))
    if args.spark:
        from support.standalone_cluster import StandaloneCluster
        cluster = StandaloneCluster(hosts).start()
        conf = " ".join("--conf %s=%s" % kv for kv in cluster.driver_conf().items())
        print("Spark master %s (daemon logs in %s)\n  pyspark --master %s %s"
              % (cluster.master_url, cluster.workdir, cluster.master_url, conf))
    print("remove with: python scripts/netns_cluster.py down")


if __name__ == "__main__":
    main()
