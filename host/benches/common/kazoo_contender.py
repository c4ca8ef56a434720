# A ZooKeeper contender for the cluster bench's `peers` section:
#   python kazoo_contender.py HOSTS ELECTION_PATH SESSION_TIMEOUT_SECONDS
# Joins kazoo's Election recipe and, once elected, prints `acquired <µs since the epoch>`
# (the machine's wall clock, the bench's clock too) and holds the election until killed.
# `connected` is printed once the session is open, before joining.
import sys
import time

from kazoo.client import KazooClient

hosts, path, timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])
client = KazooClient(hosts=hosts, timeout=timeout)
client.start()
print("connected", flush=True)


def hold():
    print("acquired %d" % (time.time_ns() // 1000), flush=True)
    while True:
        time.sleep(3600)


client.Election(path).run(hold)
