#!/usr/bin/env python3
"""Graceful shutdown of serve_test_server (the same ApiServer and signal handling
as `distllm serve`), with real streaming clients over sockets:

1. SIGTERM while a stream runs: /health and new requests get 503, the stream
   finishes normally ([DONE]), the process exits 0.
2. SIGTERM with a stream longer than --drain-timeout: the stream ends with a final
   event carrying an error and finish_reason "abort", then [DONE]; a waiting
   non-streaming request gets a 503; exit 0 soon after the drain timeout.
3. A second SIGTERM exits at once (status 128 + 15).
4. The official openai npm client (when node_modules/openai is installed) raises
   the server's error for a stream cut at the drain timeout, not "Premature close".

    shutdown_test.py SERVE_TEST_SERVER
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

SERVER = sys.argv[1]


def start(*flags):
    p = subprocess.Popen([SERVER, "--step-delay-ms", "20", *flags], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert "listening on" in line, f"server did not start: {line!r} {p.stderr.read()}"
    return p, int(line.split()[-1])


def send(port, method, path, body=None):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    data = json.dumps(body) if body is not None else ""
    s.sendall((f"{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n{data}").encode())
    return s


def read_all(s, timeout):
    s.settimeout(0.2)
    out = b""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            b = s.recv(65536)
        except socket.timeout:
            continue
        if not b:
            break
        out += b
    return out.decode(errors="replace")


def status(text):
    return int(text.split(" ", 2)[1]) if text.startswith("HTTP/1.1 ") else 0


def events(text):
    return [line[6:] for line in text.replace("\r\n", "\n").split("\n") if line.startswith("data: ")]


def completion(max_tokens, stream):
    return {"model": "test-model", "prompt": "drain me", "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, "stream": stream}


def start_stream(port, max_tokens):
    s = send(port, "POST", "/v1/completions", completion(max_tokens, True))
    buf = b""
    while b"data: " not in buf:
        b = s.recv(65536)
        assert b, "the stream closed before its first event"
        buf += b
    return s, buf.decode()


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def drain_lets_running_streams_finish():
    p, port = start("--drain-timeout", "20")
    try:
        s, first = start_stream(port, 40)  # ~1 s of steps
        p.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        health = read_all(send(port, "GET", "/health"), 3)
        check(status(health) == 503 and "shutting down" in health, f"/health while draining: {health!r}")
        late = read_all(send(port, "POST", "/v1/completions", completion(2, False)), 3)
        check(status(late) == 503, f"a new request while draining: {late!r}")
        evs = events(first + read_all(s, 10))
        check(evs and evs[-1] == "[DONE]", f"stream did not end with [DONE]: {evs[-3:]}")
        final = json.loads(evs[-2])
        check(final["choices"][0]["finish_reason"] == "length" and "error" not in final, f"final event: {final}")
        check(p.wait(10) == 0, f"exit status {p.returncode}")
    finally:
        p.kill()


def drain_timeout_ends_streams_with_an_error_event():
    p, port = start("--drain-timeout", "1")
    try:
        s, first = start_stream(port, 900)  # ~18 s of steps
        waiting = send(port, "POST", "/v1/completions", completion(900, False))
        time.sleep(0.2)
        t = time.time()
        p.send_signal(signal.SIGTERM)
        evs = events(first + read_all(s, 10))
        check(evs and evs[-1] == "[DONE]", f"stream did not end with [DONE]: {evs[-3:]}")
        final = json.loads(evs[-2])
        check(final["choices"][0]["finish_reason"] == "abort", f"final event: {final}")
        check(final.get("error", {}).get("code") == "server_shutting_down", f"final event: {final}")
        answer = read_all(waiting, 10)
        check(status(answer) == 503 and "server_shutting_down" in answer, f"non-streaming: {answer!r}")
        check(p.wait(10) == 0, f"exit status {p.returncode}")
        check(time.time() - t < 6, f"took {time.time() - t:.1f} s to exit with a 1 s drain")
    finally:
        p.kill()


def second_signal_exits_at_once():
    p, port = start("--drain-timeout", "30")
    try:
        s, _ = start_stream(port, 900)
        p.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        t = time.time()
        p.send_signal(signal.SIGTERM)
        check(p.wait(5) == 128 + signal.SIGTERM, f"exit status {p.returncode}")
        check(time.time() - t < 1.5, f"took {time.time() - t:.1f} s")
    finally:
        p.kill()


def openai_client_sees_the_error_not_a_premature_close():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    if not shutil.which("node") or not os.path.isdir(os.path.join(root, "node_modules", "openai")):
        print("skip openai_client_sees_the_error_not_a_premature_close: no node_modules/openai (npm ci)")
        return
    p, port = start("--drain-timeout", "0.5")
    try:
        node = subprocess.Popen(["node", os.path.join(here, "openai_shutdown_client.mjs"), str(port)],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        first = node.stdout.readline()
        check(first.strip() == "started", f"node: {first!r}")
        p.send_signal(signal.SIGTERM)
        out = node.stdout.read()
        node.wait(10)
        result = json.loads(out.strip().splitlines()[-1])
        check("shutting down" in result.get("error", ""), f"openai client: {result}")
        check(p.wait(10) == 0, f"exit status {p.returncode}")
    finally:
        p.kill()


for test in (drain_lets_running_streams_finish, drain_timeout_ends_streams_with_an_error_event,
             second_signal_exits_at_once, openai_client_sees_the_error_not_a_premature_close):
    test()
    print(f"ok {test.__name__}")
