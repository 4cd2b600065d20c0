#!/usr/bin/env python3
"""The server's cost of the waiting path's script calls, EVALSHA against FCALL.

    ROUNDS=5 CALLS=5000 python3 bench/script_cost.py

Starts its own redis-server on a free loopback port (no persistence) and loads the scripts
as this crate builds them from lock-runtime/src/lua: each as one text for EVALSHA (its
shared files, then its own part), and all as one Redis Functions library for FCALL (the
shared files once at the top, each script a function of its own part; scripts/library.rs
lays it out the same way). Then, per round and per way of calling, interleaved: on CALLS
keys each held by a plain `SET` (a holder), two waiters queue (the contended acquire, 2
per key), the holder releases (handing the key to the first waiter directly), and the
second waiter leaves; then CALLS other keys, held, are released uncontended (the release's
short form); between phases the stats are reset, and each phase's figure is
`usec_per_call` of EVALSHA or FCALL (the commands the script runs included). Prints the
medians and every round's figure as a Markdown table. Every loop is bounded by ROUNDS
and CALLS.
"""

import os
import statistics
import sys

from release_cost import start_server

LUA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lock-runtime", "src", "lua")
ROUNDS = int(os.environ.get("ROUNDS", "5"))
CALLS = int(os.environ.get("CALLS", "5000"))
SHARED = ["prelude.lua", "semaphore_permits.lua", "renew_lease.lua", "rw_prelude.lua"]
# name, head (before the shared files), shared files, own part
SCRIPTS = [
    ("acquire", "", ["prelude.lua"], "acquire.lua"),
    ("release", "release_uncontended.lua", ["prelude.lua", "semaphore_permits.lua"], "release.lua"),
    ("leave", "", ["prelude.lua", "semaphore_permits.lua"], "leave.lua"),
]


def lua(name):
    if not name:
        return ""
    with open(os.path.join(LUA, name)) as f:
        return f.read()


def library():
    text = "#!lua name=script_cost\n" + "".join(lua(f) + "\n" for f in SHARED)
    for name, head, _, own in SCRIPTS:
        text += (
            "redis.register_function{function_name = '%s', flags = {'allow-cross-slot-keys'}, "
            "callback = function(KEYS, ARGV)\n%s\n%s\nend}\n" % (name, lua(head), lua(own))
        )
    return text


def names(key):
    return {
        kind: "~lock/%s{%s}" % (kind, key) for kind in ("fence", "queue", "deadlines", "ttls", "released")
    }


def phase(client, how, target, calls):
    """Runs `calls` (keys, args) by `how` (EVALSHA or FCALL) of `target`; the µs per call."""
    client.config_resetstat()
    pipe = client.pipeline(transaction=False)
    for i, (keys, args) in enumerate(calls):
        pipe.execute_command(how, target[0] if how == "EVALSHA" else target[1], len(keys), *keys, *args)
        if len(pipe) >= 500 or i == len(calls) - 1:
            pipe.execute()
    return client.info("commandstats")["cmdstat_" + how.lower()]["usec_per_call"]


def round_of(client, how, targets):
    client.flushall()
    pipe = client.pipeline(transaction=False)
    for i in range(CALLS):
        pipe.set("stock:%d" % i, "h%031x" % i, px=600000)
    pipe.execute()
    acquires, releases, leaves = [], [], []
    for i in range(CALLS):
        key = "stock:%d" % i
        n = names(key)
        for waiter in ("a", "b"):
            keys = [key, n["fence"], n["queue"], n["deadlines"], n["ttls"]]
            acquires.append((keys, ["%s%031x" % (waiter, i), 30000, 0, 1, 1000, 0]))
        queue_keys = [key, n["queue"], n["deadlines"], n["ttls"]]
        releases.append((queue_keys, ["h%031x" % i, n["released"], "PUBLISH", 500]))
        leaves.append((queue_keys, ["b%031x" % i, n["released"], "PUBLISH", 500]))
    figures = [phase(client, how, targets["acquire"], acquires)]
    figures.append(phase(client, how, targets["release"], releases))
    granted = client.get("stock:0")
    if granted != b"a%031x" % 0:
        sys.exit("the release did not grant the first waiter: %r" % granted)
    figures.append(phase(client, how, targets["leave"], leaves))
    # The uncontended release, short form (lock key, queue; the token), on keys held anew.
    pipe = client.pipeline(transaction=False)
    for i in range(CALLS):
        pipe.set("free:%d" % i, "u%031x" % i, px=600000)
    pipe.execute()
    shorts = [(["free:%d" % i, names("free:%d" % i)["queue"]], ["u%031x" % i]) for i in range(CALLS)]
    figures.append(phase(client, how, targets["release"], shorts))
    if client.exists("free:0"):
        sys.exit("the uncontended release did not release")
    return figures


def main():
    server, client = start_server()
    try:
        client.function_load(library(), replace=True)
        targets = {
            name: (client.script_load(lua(head) + "".join(lua(f) for f in shared) + lua(own)), name)
            for name, head, shared, own in SCRIPTS
        }
        figures = {(how, p): [] for how in ("EVALSHA", "FCALL") for p in range(4)}
        for _ in range(ROUNDS):
            for how in ("EVALSHA", "FCALL"):
                for p, figure in enumerate(round_of(client, how, targets)):
                    figures[(how, p)].append(figure)
        version = client.info("server")["redis_version"]
    finally:
        server.terminate()
    print("redis %s, %d rounds of %d keys, µs per call (`INFO commandstats`)\n" % (version, ROUNDS, CALLS))
    print("| call | EVALSHA median µs | FCALL median µs | rounds (EVALSHA; FCALL) |")
    print("|---|---:|---:|---|")
    for p, name in enumerate(["contended acquire (queues)", "release to a queued waiter", "leave", "uncontended release (short form)"]):
        e, f = figures[("EVALSHA", p)], figures[("FCALL", p)]
        print(
            "| %s | %.2f | %.2f | %s; %s |"
            % (name, statistics.median(e), statistics.median(f), " ".join("%.2f" % x for x in e), " ".join("%.2f" % x for x in f))
        )


if __name__ == "__main__":
    main()
