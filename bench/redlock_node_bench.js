#!/usr/bin/env node
// node-redlock 4 (with ioredis) as a foreign client sharing a key with our tasks (section 12,
// bench/src/foreign.rs). Run by the bench driver, never by hand in the normal flow:
//
//     NODE_PATH=bench/target/node/node_modules node redlock_node_bench.js URL KEY SECONDS TASKS HOLD_MS
//
// Connects and warms up, prints "ready", starts its window when "go" arrives on stdin
// (waiting 60 s at most), and prints one JSON line: every wait that ended in an
// acquisition, the waits still open at the end, the mean hold and its CPU time. TASKS async
// tasks each take the lock in a loop (`redlock.lockWithOptions(key, 10000, …)`, retrying
// every 50 ms until the window ends),
// hold it HOLD_MS with the server-side overlap counter marked (`INCR KEY:inside`,
// `INCR KEY:overlaps` when another holder is inside, `DECR` before the unlock), and ask
// again at once. Every loop is bounded by SECONDS and by a count.
'use strict';

const Redis = require('ioredis');
const Redlock = require('redlock');
const readline = require('readline');

const [url, key, secondsArg, tasksArg, holdArg] = process.argv.slice(2);
const seconds = Number(secondsArg);
const tasks = Number(tasksArg);
const holdMs = Number(holdArg);
const MAX_CYCLES = 5000000;
const RETRY_MS = 50;

const client = new Redis(url);
const redlock = new Redlock([client], { retryCount: 1, retryDelay: RETRY_MS, retryJitter: 10 });
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const now = () => Number(process.hrtime.bigint() / 1000n) / 1e6;

function go() {
  return new Promise((resolve, reject) => {
    const lines = readline.createInterface({ input: process.stdin });
    const timer = setTimeout(() => reject(new Error('no go from the bench within 60 s')), 60000);
    lines.once('line', (line) => {
      clearTimeout(timer);
      lines.close();
      if (line.trim() === 'go') resolve(); else reject(new Error(`said ${line}, not go`));
    });
  });
}

async function worker(end, out) {
  for (let cycle = 0; cycle < MAX_CYCLES; cycle++) {
    const t0 = now();
    if (t0 >= end) return;
    const retries = Math.max(1, Math.ceil(((end - t0) * 1000) / RETRY_MS));
    let lock;
    try {
      lock = await redlock.lockWithOptions(key, 10000, { retryCount: retries, retryDelay: RETRY_MS });
    } catch (err) {
      out.censored.push(Math.round((now() - t0) * 1e6));
      return;
    }
    const acquired = now();
    if (acquired >= end) {
      out.censored.push(Math.round((acquired - t0) * 1e6));
      await lock.unlock().catch(() => {});
      return;
    }
    out.waits.push(Math.round((acquired - t0) * 1e6));
    if ((await client.incr(`${key}:inside`)) > 1) await client.incr(`${key}:overlaps`);
    await sleep(holdMs);
    await client.decr(`${key}:inside`);
    out.holds.push(now() - acquired);
    await lock.unlock().catch(() => {});
  }
}

async function main() {
  await client.ping();
  const warm = await redlock.lock(`${key}:warm:${process.pid}`, 10000);
  await warm.unlock();
  process.stdout.write('ready\n');
  await go();
  const cpu0 = process.cpuUsage();
  const end = now() + seconds;
  const out = { waits: [], censored: [], holds: [] };
  await Promise.all(Array.from({ length: tasks }, () => worker(end, out)));
  const cpu = process.cpuUsage(cpu0);
  const meanHold = out.holds.length ? out.holds.reduce((a, b) => a + b, 0) / out.holds.length : 0;
  const report = JSON.stringify({
    waits_us: out.waits,
    censored_us: out.censored,
    mean_hold_us: meanHold * 1e6,
    client_cpu_s: (cpu.user + cpu.system) / 1e6,
  });
  client.disconnect();
  // Exits once the line is written: stdin and the client's timers would keep it alive.
  process.stdout.write(report + '\n', () => process.exit(0));
}

main().catch((err) => {
  process.stderr.write(`redlock_node_bench: ${err && err.stack ? err.stack : err}\n`);
  process.exit(1);
});
