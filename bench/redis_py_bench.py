#!/usr/bin/env python3
"""redis-py's Lock as a cross-ecosystem reference for the lock benchmark.

Run by the bench driver (bench/src/python.rs), never by hand in the normal flow:

    redis_py_bench.py uncontended URL KEY SECONDS
    redis_py_bench.py hot URL KEY SECONDS TASKS HOLD_MS
    redis_py_bench.py hotworker URL KEY SECONDS TASKS HOLD_MS
    redis_py_bench.py waitworker URL PREFIX FROM COUNT
    redis_py_bench.py foreign URL KEY SECONDS TASKS HOLD_MS

Prints one JSON object on stdout. Every loop is bounded by SECONDS and by a count.
`hotworker` is one process of the multi-process hot key (bench/src/processes.rs): it
connects and warms up, prints "ready", starts its window when "go" arrives on stdin
(waiting 60 s at most), and prints its JSON object as one line. `foreign` is the same
worker sharing the key with our tasks (bench/src/foreign.rs): each hold also marks the
server-side overlap counter (`INCR KEY:inside`, `INCR KEY:overlaps` when it finds another
holder inside, `DECR` before the release), which our holders mark too.
`waitworker` is one waiting process of section 11 (bench/src/waiting.rs): one
`redis.asyncio` task blocking on each of PREFIX:FROM .. PREFIX:FROM+COUNT-1 (keys the bench
holds), "ready" once they all ask, its CPU clock from "go" to "stop" on stdin, then its JSON
object as one line; it exits, its waiters still waiting, at the next line or end of stdin.
The lock is used as a user would: `Redis.lock(name, timeout=10)` with its defaults
(blocking, polling every 0.1 s), one thread per contending task.
"""

import json
import os
import resource
import select
import sys
import threading
import time

import redis

MAX_CYCLES = 5_000_000


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def uncontended(url, key, seconds):
    client = redis.Redis.from_url(url)
    lock = client.lock(key, timeout=10, blocking=False)
    for _ in range(200):  # warm-up: connection, script load
        if lock.acquire():
            lock.release()
    cycles = failures = 0
    cpu0 = cpu_seconds()
    start = time.perf_counter()
    deadline = start + seconds
    while cycles < MAX_CYCLES and time.perf_counter() < deadline:
        if lock.acquire():
            lock.release()
            cycles += 1
        else:
            failures += 1
    elapsed = time.perf_counter() - start
    return {
        "cycles": cycles,
        "failures": failures,
        "elapsed_s": elapsed,
        "client_cpu_s": cpu_seconds() - cpu0,
    }


def wall_us():
    return time.time_ns() // 1000


def ready_then_go(client, key, tasks):
    """Warm-up (a cycle on a key of its own, the threads' connections opened), then
    "ready" on stdout and "go" awaited on stdin."""
    warm = client.lock(f"{key}:warm:{os.getpid()}", timeout=10)
    if warm.acquire(blocking=False):
        warm.release()
    pool = client.connection_pool
    connections = []
    for _ in range(tasks):
        try:
            connections.append(pool.get_connection())  # redis-py 6 and later
        except TypeError:
            connections.append(pool.get_connection("PING"))  # redis-py 5
    for connection in connections:
        pool.release(connection)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    readable, _, _ = select.select([sys.stdin], [], [], 60)
    if not readable or sys.stdin.readline().strip() != "go":
        raise SystemExit("hotworker: no go from the bench within 60 s")


def hot(url, key, seconds, tasks, hold_ms, worker_mode=False, overlap=False):
    client = redis.Redis.from_url(url, max_connections=tasks + 4)
    client.ping()
    if worker_mode:
        ready_then_go(client, key, tasks)
    start = time.perf_counter()
    end = start + seconds
    state = {"last_releaser": -1, "held": False}
    guard = threading.Lock()
    results = []

    def worker(me):
        waits, censored, holds, intervals = [], [], [], []
        same = violations = 0
        for _ in range(MAX_CYCLES):
            t0 = time.perf_counter()
            if t0 >= end:
                break
            lock = client.lock(key, timeout=10)
            if not lock.acquire(blocking=True, blocking_timeout=max(end - t0, 0.001)):
                censored.append(time.perf_counter() - t0)
                break
            acquired = time.perf_counter()
            acquired_wall = wall_us()
            with guard:
                if state["held"]:
                    violations += 1
                state["held"] = True
                if state["last_releaser"] == me:
                    same += 1
            if acquired >= end:
                # Too late to count: give it back at once.
                with guard:
                    state["held"] = False
                lock.release()
                censored.append(acquired - t0)
                break
            waits.append(acquired - t0)
            if overlap and client.incr(f"{key}:inside") > 1:
                client.incr(f"{key}:overlaps")
            time.sleep(hold_ms / 1000.0)
            if overlap:
                client.decr(f"{key}:inside")
            holds.append(time.perf_counter() - acquired)
            intervals.append((acquired_wall, wall_us(), me))
            with guard:
                state["held"] = False
                state["last_releaser"] = me
            lock.release()
        results.append((waits, censored, holds, same, violations, intervals))

    cpu0 = cpu_seconds()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(tasks)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=seconds + 30)
    waits = [w for r in results for w in r[0]]
    censored = [w for r in results for w in r[1]]
    holds = [h for r in results for h in r[2]]
    out = {
        "acquisitions": len(waits),
        "elapsed_s": seconds,
        "waits_us": [int(w * 1e6) for w in waits],
        "censored_us": [int(w * 1e6) for w in censored],
        "mean_hold_us": (sum(holds) / len(holds) * 1e6) if holds else 0.0,
        "same_task": sum(r[3] for r in results),
        "violations": sum(r[4] for r in results),
        "client_cpu_s": cpu_seconds() - cpu0,
    }
    if worker_mode:
        out["intervals_us"] = [i for r in results for i in r[5]]
    return out


def waitworker(url, prefix, first, count):
    import asyncio

    import redis.asyncio

    async def run():
        # A connection per waiter (a task asking holds one; the pool's default of 100
        # fails the others with "Too many connections").
        client = redis.asyncio.Redis.from_url(url, max_connections=count + 16)
        await client.ping()
        acquired = [0]
        failed = []

        async def wait(key):
            lock = client.lock(key, timeout=10)
            try:
                if await lock.acquire(blocking=True, blocking_timeout=600):
                    acquired[0] += 1
            except Exception as err:  # noqa: BLE001 - reported to the bench
                failed.append(repr(err))

        # Started 50 at a time: 1,000 connects at once overflow the server's accept queue.
        tasks = []
        for start in range(first, first + count, 50):
            for i in range(start, min(start + 50, first + count)):
                tasks.append(asyncio.create_task(wait(f"{prefix}:{i}")))
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        loop = asyncio.get_running_loop()
        go = await asyncio.wait_for(loop.run_in_executor(None, sys.stdin.readline), 90)
        if go.strip() != "go":
            raise SystemExit(f"waitworker: expected go, got {go!r}")
        cpu0 = cpu_seconds()
        await asyncio.wait_for(loop.run_in_executor(None, sys.stdin.readline), 600)
        out = {
            "client_cpu_s": cpu_seconds() - cpu0,
            "acquired": acquired[0],
            "failed": len(failed),
            "failure": failed[0] if failed else None,
        }
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()
        # The waiters go on until the bench has tapped what they send.
        try:
            await asyncio.wait_for(loop.run_in_executor(None, sys.stdin.readline), 60)
        except asyncio.TimeoutError:
            pass
        del tasks

    loop = asyncio.new_event_loop()
    loop.run_until_complete(run())
    # The waiters still wait: the process ends with them.
    os._exit(0)


def main(argv):
    mode = argv[1]
    if mode == "version":
        out = {"redis_py": redis.__version__, "python": sys.version.split()[0]}
    elif mode == "uncontended":
        out = uncontended(argv[2], argv[3], float(argv[4]))
    elif mode == "hot":
        out = hot(argv[2], argv[3], float(argv[4]), int(argv[5]), float(argv[6]))
    elif mode == "hotworker":
        out = hot(argv[2], argv[3], float(argv[4]), int(argv[5]), float(argv[6]), True)
    elif mode == "foreign":
        out = hot(argv[2], argv[3], float(argv[4]), int(argv[5]), float(argv[6]), True, True)
    elif mode == "waitworker":
        waitworker(argv[2], argv[3], int(argv[4]), int(argv[5]))
        return
    else:
        raise SystemExit(f"unknown mode {mode}")
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv)
