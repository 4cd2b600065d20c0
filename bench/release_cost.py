#!/usr/bin/env python3
"""The server's cost of one uncontended release, by variant, from `INFO commandstats`.

    python3 bench/release_cost.py            # ROUNDS=5 CALLS=20000 by default

Starts its own redis-server on a free loopback port (no persistence), loads the release
as this crate builds it (lock-runtime/src/lua: release_uncontended.lua, prelude.lua,
semaphore_permits.lua, release.lua) and the variants below, both as scripts (EVALSHA) and
as one Redis Functions library (FCALL; Redis 7 or Valkey), then for each round and variant,
interleaved: resets the stats, sends CALLS pairs of `SET key token` and the release of that
token (pipelined, 256 keys in turn), and reads `usec_per_call` of EVALSHA or FCALL (the
commands the script runs included; the SET is not). Prints the medians and every round's
figure as a Markdown table. Every loop is bounded by ROUNDS and CALLS.

Variants:
- `ours`: the release's short form as the client sends it (lock key, queue; the token);
- `ours, no EXISTS`: the same text with the queue's `EXISTS` taken out (what a release
  would cost if a queued waiter marked the lock key, so that the `GET` told);
- `GET, EXISTS, DEL`: a bare compare-and-delete that also looks at the queue (two keys);
- `GET, DEL, 2 keys`: a bare compare-and-delete named with two keys (the second unused);
- `GET, DEL`: raw's compare-and-delete (one key);
- `helpers, GET, DEL`: raw's compare-and-delete after the definitions of the queue's and the
  semaphore's helpers (prelude.lua, semaphore_permits.lua), which every script call of the
  waiting path runs before its own work. As a function, the library defines them once, at
  load: what FCALL would save the waiting path per call.
"""

import os
import socket
import statistics
import subprocess
import sys
import time

import redis

LUA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lock-runtime", "src", "lua")
ROUNDS = int(os.environ.get("ROUNDS", "5"))
CALLS = int(os.environ.get("CALLS", "20000"))


def lua(name):
    with open(os.path.join(LUA, name)) as f:
        return f.read()


def variants():
    ours = "".join(
        lua(f)
        for f in ("release_uncontended.lua", "prelude.lua", "semaphore_permits.lua", "release.lua")
    )
    exists = "head_queued = redis.call('EXISTS', KEYS[2]) == 1"
    assert exists in ours, "release_uncontended.lua no longer reads the queue this way"
    helpers = lua("prelude.lua") + lua("semaphore_permits.lua")
    cad = "if redis.call('GET', KEYS[1]) == ARGV[1] then {} return redis.call('DEL', KEYS[1]) end return 0"
    return [
        ("ours", ours, 2),
        ("ours, no EXISTS", ours.replace(exists, "head_queued = false", 1), 2),
        ("GET, EXISTS, DEL", cad.format("if redis.call('EXISTS', KEYS[2]) == 1 then return -2 end"), 2),
        ("GET, DEL, 2 keys", cad.format(""), 2),
        ("GET, DEL", cad.format(""), 1),
        ("helpers, GET, DEL", cad.format(""), 1, helpers),
    ]


def start_server():
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    server = subprocess.Popen(args, stdout=subprocess.DEVNULL)
    client = redis.Redis(port=port)
    for _ in range(200):
        try:
            client.ping()
            return server, client
        except redis.ConnectionError:
            time.sleep(0.05)
    server.terminate()
    sys.exit("redis-server did not answer within 10 s")


def measure(client, command, target, nkeys):
    client.config_resetstat()
    pipe = client.pipeline(transaction=False)
    for i in range(CALLS):
        key = "stock:%d" % (i % 256)
        token = "%032x" % i
        keys = [key, "~lock/queue{%s}" % key][:nkeys]
        pipe.set(key, token)
        pipe.execute_command(command, target, nkeys, *keys, token)
        if len(pipe) >= 1000 or i == CALLS - 1:
            replies = pipe.execute()
            if replies[1::2] != [1] * (len(replies) // 2):
                sys.exit("a release did not release: %r" % replies[1:8:2])
    return client.info("commandstats")["cmdstat_" + command.lower()]["usec_per_call"]


def main():
    server, client = start_server()
    try:
        table = variants()
        # A variant's shared part (its helpers) is the library's, defined once at load; as a
        # script it comes first in the text, run on every call.
        table = [(v[0], v[1], v[2], v[3] if len(v) > 3 else "") for v in table]
        library = "#!lua name=release_cost\n" + "".join(
            "do\n%s\nredis.register_function('v%d', function(KEYS, ARGV)\n%s\nend)\nend\n"
            % (shared, i, text)
            for i, (_, text, _, shared) in enumerate(table)
        )
        client.function_load(library, replace=True)
        shas = [client.script_load(shared + text) for _, text, _, shared in table]
        runs = [(name, "EVALSHA", sha, n) for (name, _, n, _), sha in zip(table, shas)]
        runs += [(name, "FCALL", "v%d" % i, n) for i, (name, _, n, _) in enumerate(table)]
        figures = {run: [] for run in runs}
        for _ in range(ROUNDS):
            for run in runs:
                figures[run].append(measure(client, run[1], run[2], run[3]))
        version = client.info("server")["redis_version"]
    finally:
        server.terminate()
    print("redis %s, %d rounds of %d releases, µs per call (`INFO commandstats`)\n" % (version, ROUNDS, CALLS))
    print("| variant | call | median µs | rounds |")
    print("|---|---|---:|---|")
    for run in runs:
        print("| %s | %s | %.2f | %s |" % (run[0], run[1], statistics.median(figures[run]), " ".join("%.2f" % x for x in figures[run])))


if __name__ == "__main__":
    main()
