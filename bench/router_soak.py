#!/usr/bin/env python3
"""Soak of `distllm route` at twice its replicas' capacity, with replicas killed.

    python3 bench/router_soak.py --distllm build/release/bin/distllm \
        --server build/release/bin/serve_test_server [--duration 600] [--kill-every 60]

Starts N serve_test_server replicas (the real server and engine around the
deterministic test runner; --step-delay-ms paces the steps) and `distllm route`
in front of them, all on 127.0.0.1, then runs 2 x capacity client threads
(capacity = replicas x (max-num-seqs + max-queued-requests)) for the duration:
streaming and plain completions, some clients hanging up mid-stream. Every
--kill-every seconds one replica (in turn) gets SIGKILL and is restarted on its
port a second later. Meanwhile it samples the RSS of the router and of every
replica, and every replica's /health.

Passes when: no stream ended without either [DONE] after a finish_reason or an
error event and [DONE] (a silently truncated 200); no engine died (a replica's
/health said the engine loop stopped, or a replica exited without being killed);
no request got anything but 200, 429 (queue full) or 503 (no replica up), nor
lost its connection to the router; the router and each replica's RSS stayed flat
after warm-up; and at the end the router is healthy and serves again.

Bounded: every client stops at the deadline and after --max-requests-per-client;
all traffic goes to 127.0.0.1.
"""
import argparse
import http.client
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

HOST = "127.0.0.1"
# What a client may see while replicas are killed: a complete answer, a stream
# ended by an error event and [DONE], its own hang-up, 429 (queue full), 503 (no
# replica up yet).
OK_OUTCOMES = ("complete", "error_event", "hung_up", "rejected_429", "unavailable_503")


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


def read_port(proc, what):
    """The port from the first line, "listening on [http://host:]PORT"."""
    line = proc.stdout.readline().decode(errors="replace").strip()
    if "listening on" not in line:
        raise SystemExit(f"soak: {what} did not start (got {line!r})")
    return int(line.rsplit(":", 1)[-1].split()[-1]) if "http://" in line else int(line.split()[-1])


class Replica:
    def __init__(self, server, args, index):
        self.server, self.args, self.index = server, args, index
        self.port = 0
        self.proc = None
        self.killed = 0
        self.lifetimes = []  # per incarnation: [(seconds since start, rss KiB)]

    def start(self):
        cmd = [self.server, "--port", str(self.port), "--step-delay-ms", str(self.args.step_delay_ms),
               "--max-num-seqs", str(self.args.max_num_seqs), "--max-queued-requests", str(self.args.max_queued),
               "--num-blocks", "128", "--max-num-batched-tokens", "64", "--max-context", "256"]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        port = read_port(self.proc, f"replica {self.index}")
        if self.port == 0:
            self.port = port
        self.started = time.monotonic()
        self.lifetimes.append([])

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.killed += 1

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.stdin.close()  # the test server exits when its stdin closes
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.examples = []

    def add(self, key, example=None):
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + 1
            if example and key not in OK_OUTCOMES and len(self.examples) < 12:
                self.examples.append(f"{key}: {example}")

    def get(self, key):
        return self.counts.get(key, 0)


def classify_stream(data):
    """(outcome, detail) of a 200 event stream's raw body."""
    done, error, finishes, bad = False, None, 0, 0
    for event in data.replace(b"\r\n", b"\n").split(b"\n\n"):
        payload = b"\n".join(l[5:].lstrip(b" ") for l in event.split(b"\n") if l.startswith(b"data:"))
        if not payload:
            continue
        if payload == b"[DONE]":
            done = True
            continue
        try:
            j = json.loads(payload)
        except ValueError:
            bad += 1
            continue
        if "error" in j:
            error = j["error"]
        for c in j.get("choices", []):
            if c.get("finish_reason") is not None:
                finishes += 1
    if bad:
        return "truncated", f"{bad} unreadable events"
    if done and error is not None:
        return "error_event", error.get("code")
    if done and finishes == 1:
        return "complete", None
    return "truncated", f"done={done} finishes={finishes} bytes={len(data)} tail={data[-120:]!r}"


def one_request(port, rng, tally):
    stream = rng.random() < 0.7
    hang_up = stream and rng.random() < 0.1
    body = {"model": "test-model", "prompt": "soak " + "".join(rng.choice("abcdefgh") for _ in range(rng.randint(4, 40))),
            "max_tokens": rng.randint(8, 64), "temperature": 0, "ignore_eos": True, "stream": stream}
    conn = http.client.HTTPConnection(HOST, port, timeout=60)
    try:
        conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            resp.read()
            key = {429: "rejected_429", 503: "unavailable_503"}.get(resp.status, f"status_{resp.status}")
            tally.add(key, None if resp.status in (429, 503) else str(resp.status))
            return resp.status
        if not stream:
            j = json.loads(resp.read())
            ok = j.get("choices") and j["choices"][0].get("finish_reason") is not None
            tally.add("complete" if ok else "bad_body", None if ok else str(j)[:200])
            return 200
        data = b""
        try:
            while True:
                chunk = resp.read1(65536)
                if not chunk:
                    break
                data += chunk
                if hang_up and data.count(b"\n\n") >= 2:
                    tally.add("hung_up")
                    return 200
        except (http.client.HTTPException, OSError) as e:
            data += f"<{type(e).__name__}>".encode()  # the body broke off: judged below
        outcome, detail = classify_stream(data)
        tally.add(outcome, detail)
        return 200
    except (http.client.HTTPException, OSError, ValueError) as e:
        tally.add("transport_error", f"{type(e).__name__}: {e}")
        return 0
    finally:
        conn.close()


def client_loop(i, port, deadline, args, tally):
    rng = random.Random(1000 + i)
    for _ in range(args.max_requests_per_client):
        if time.monotonic() >= deadline:
            return
        status = one_request(port, rng, tally)
        if status in (429, 503, 0):
            time.sleep(0.1 + rng.random() * 0.2)  # refused clients back off (Retry-After), as real ones do


def get(port, path, timeout=2.0):
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read().decode(errors="replace")
    except (http.client.HTTPException, OSError) as e:
        return 0, str(e)
    finally:
        conn.close()


def metric(text, name):
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return -1.0


def growth_ok(warm, peak):
    return warm <= 0 or peak <= warm + max(16 * 1024, warm // 5)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--distllm", required=True)
    p.add_argument("--server", required=True, help="serve_test_server")
    p.add_argument("--duration", type=float, default=600)
    p.add_argument("--kill-every", type=float, default=60)
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--max-num-seqs", type=int, default=4)
    p.add_argument("--max-queued", type=int, default=4)
    p.add_argument("--step-delay-ms", type=int, default=5)
    p.add_argument("--max-requests-per-client", type=int, default=100000)
    p.add_argument("--json", help="write the figures here too")
    p.add_argument("--router-log", help="the router's log (stderr) goes here")
    args = p.parse_args()
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)

    replicas = [Replica(args.server, args, i) for i in range(args.replicas)]
    for r in replicas:
        r.start()
    router = subprocess.Popen(
        [args.distllm, "route", "--port", "0", "--threads", "256", "--health-interval", "0.2", "--health-timeout", "1",
         "--failure-threshold", "2", "--breaker-open", "1"] +
        sum((["--replica", f"http://{HOST}:{r.port}"] for r in replicas), []),
        stdout=subprocess.PIPE, stderr=open(args.router_log, "w") if args.router_log else subprocess.DEVNULL)
    port = read_port(router, "the router")
    for _ in range(100):
        if get(port, "/health")[0] == 200:
            break
        time.sleep(0.05)

    capacity = args.replicas * (args.max_num_seqs + args.max_queued)
    clients = 2 * capacity
    tally = Tally()
    start = time.monotonic()
    deadline = start + args.duration
    threads = [threading.Thread(target=client_loop, args=(i, port, deadline, args, tally), daemon=True)
               for i in range(clients)]
    for t in threads:
        t.start()

    router_rss = []  # (seconds, KiB)
    engine_deaths, crashes = [], []
    next_kill, victim = start + args.kill_every, 0
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = time.monotonic()
        router_rss.append((now - start, rss_kib(router.pid)))
        if router.poll() is not None:
            crashes.append("the router exited")
            break
        for r in replicas:
            if r.proc.poll() is not None:
                crashes.append(f"replica {r.index} exited by itself (status {r.proc.returncode})")
                r.start()
                continue
            r.lifetimes[-1].append((now - r.started, rss_kib(r.proc.pid)))
            status, body = get(r.port, "/health", timeout=5.0)
            if status == 503 and "engine" in body:
                engine_deaths.append(f"replica {r.index}: {body[:200]}")
        if now >= next_kill and now + 2 < deadline:
            r = replicas[victim % len(replicas)]
            r.kill()
            time.sleep(1.0)  # down for a second, then back on its port
            r.start()
            victim += 1
            next_kill += args.kill_every
    for t in threads:
        t.join(timeout=90)
    stuck = sum(t.is_alive() for t in threads)

    # The router recovers and serves after the last kill.
    recovered = False
    for _ in range(100):
        conn_ok = one_request(port, random.Random(7), Tally()) == 200
        if conn_ok and get(port, "/health")[0] == 200:
            recovered = True
            break
        time.sleep(0.1)
    metrics = get(port, "/metrics")[1]
    replica_failed = sum(max(0.0, metric(get(r.port, "/metrics")[1], 'distllm:request_failed_total{model_name="test-model"}'))
                         for r in replicas)
    router.send_signal(signal.SIGTERM)
    try:
        router.wait(timeout=20)
    except subprocess.TimeoutExpired:
        router.kill()
    for r in replicas:
        r.stop()

    # RSS: warm = first sample at 30% of the run (router) / 10 s into an incarnation
    # (replicas), against the peak afterwards.
    warm_router = next((kib for t, kib in router_rss if t >= 0.3 * args.duration), -1)
    peak_router = max((kib for t, kib in router_rss if t >= 0.3 * args.duration), default=-1)
    replica_growth = []
    for r in replicas:
        for life in r.lifetimes:
            after = [kib for t, kib in life if t >= 10 and kib > 0]
            if len(after) >= 2:
                replica_growth.append((r.index, after[0], max(after)))
    worst = max(replica_growth, key=lambda g: g[2] - g[1], default=(0, 0, 0))

    figures = {
        "duration_s": args.duration, "kill_every_s": args.kill_every, "replicas": args.replicas,
        "capacity": capacity, "clients": clients, "kills": sum(r.killed for r in replicas),
        "outcomes": dict(sorted(tally.counts.items())),
        "truncated_without_error": tally.get("truncated"),
        "engine_deaths": len(engine_deaths), "unexpected_exits": len(crashes),
        "replica_request_failed_total": replica_failed,
        "router_streams_broken_total": metric(metrics, "distllm_router_streams_broken_total"),
        "router_retries_total": metric(metrics, "distllm_router_retries_total"),
        "router_failures_total": metric(metrics, "distllm_router_failures_total"),
        "router_model_unavailable_total": metric(metrics, "distllm_router_model_unavailable_total"),
        "router_rss_kib": {"start": router_rss[0][1] if router_rss else -1, "warm": warm_router, "peak_after": peak_router},
        "replica_rss_kib_worst": {"replica": worst[0], "warm": worst[1], "peak_after": worst[2]},
        "clients_stuck": stuck, "recovered": recovered,
    }
    print("soak: " + json.dumps(figures, indent=1))
    for e in tally.examples + engine_deaths + crashes:
        print("  " + e, file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1)

    failures = []
    if tally.get("truncated"):
        failures.append(f"{tally.get('truncated')} streams ended without [DONE] or an error event")
    if engine_deaths or crashes:
        failures.append("an engine died or a process exited by itself")
    bad = {k: v for k, v in tally.counts.items() if k not in OK_OUTCOMES}
    if bad:
        failures.append(f"unexpected outcomes: {bad}")
    if replica_failed > 0:
        failures.append(f"replicas report {replica_failed:.0f} failed requests")
    if tally.get("complete") == 0 or figures["kills"] == 0:
        failures.append("the soak completed no request or killed no replica")
    if not growth_ok(warm_router, peak_router):
        failures.append(f"router RSS grew after warm-up: {warm_router} -> {peak_router} KiB")
    for idx, warm, peak in replica_growth:
        if not growth_ok(warm, peak):
            failures.append(f"replica {idx} RSS grew: {warm} -> {peak} KiB")
    if stuck:
        failures.append(f"{stuck} client threads never finished")
    if not recovered:
        failures.append("the router did not serve again after the soak")
    for f in failures:
        print("soak FAILED: " + f, file=sys.stderr)
    if not failures:
        print("soak: passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
