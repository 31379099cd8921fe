#!/usr/bin/env python3
"""`distllm serve --model DIR --watch` as a process (docs/serving.md "Hot reload").

A tiny random Llama (untied head: varied greedy outputs) with a byte-level tokenizer is served; while 3 clients send
requests (bounded in count and time), serve_make_tiny_model writes a model with
another seed over DIR (an atomic directory exchange, as `train --out` does). The
watcher must swap it in: no request fails, /metrics shows version 2 and one reload,
the log says "reloaded ... in X s", and greedy outputs equal those of a server started
on the new weights. /admin/reload needs the API key (401 without it).

  reload_cli_test.py DISTLLM_BINARY MAKE_TINY_MODEL_BINARY
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

KEY = "cli-reload-key"
PROMPTS = ["Once upon a time", "The quick brown fox", "In the beginning", "Hello, world"]


def start(distllm, model_dir, log_path, extra):
    log = open(log_path, "w")
    proc = subprocess.Popen([distllm, "serve", "--model", model_dir, "--port", "0", "--threads", "1",
                             "--served-model-name", "m", "--kv-cache-memory", "0.02"] + extra,
                            stdout=subprocess.PIPE, stderr=log, text=True)
    deadline = time.time() + 60
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        m = re.search(r"listening on http://([^:]+):(\d+)", line)
        if m:
            return proc, f"http://127.0.0.1:{m.group(2)}"
    proc.kill()
    raise SystemExit(f"server did not start; log: {open(log_path).read()}")


def request(url, path, body=None, key=None, timeout=30):
    data = json.dumps(body).encode() if body is not None else b""
    req = urllib.request.Request(url + path, data=data if body is not None or path.startswith("/admin") else None,
                                 method="POST" if (body is not None or path.startswith("/admin")) else "GET")
    req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", "Bearer " + key)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def greedy(url, key):
    out = []
    for p in PROMPTS:
        status, body = request(url, "/v1/completions",
                               {"model": "m", "prompt": p, "max_tokens": 8, "temperature": 0}, key)
        assert status == 200, body
        out.append(json.loads(body)["choices"][0]["text"])
    return out


def fingerprint(url, key):
    status, body = request(url, "/v1/completions", {"model": "m", "prompt": "hi", "max_tokens": 1}, key)
    assert status == 200, body
    return json.loads(body).get("system_fingerprint")


def metric(url, name):
    _, text = request(url, "/metrics")
    m = re.search(r"^distllm:%s\{[^}]*\} (\S+)$" % re.escape(name), text, re.M)
    return float(m.group(1)) if m else None


def main():
    distllm, make_model = sys.argv[1], sys.argv[2]
    tmp = tempfile.mkdtemp(prefix="distllm_reload_cli_")
    procs = []
    try:
        model, other = os.path.join(tmp, "model"), os.path.join(tmp, "other")
        for d, seed in ((model, 1), (other, 2)):
            subprocess.run([make_model, d, "--family", "llama", "--tokenizer", "byte", "--seed", str(seed)], check=True,
                           stdout=subprocess.DEVNULL, timeout=60)
        ref_proc, ref_url = start(distllm, other, os.path.join(tmp, "ref.log"), [])
        procs.append(ref_proc)
        ref_new = greedy(ref_url, None)
        ref_proc.terminate()
        ref_proc.wait(timeout=30)

        log_path = os.path.join(tmp, "serve.log")
        proc, url = start(distllm, model, log_path, ["--watch", "--watch-interval", "0.2", "--api-key", KEY,
                                                     "--log-stats-interval", "0.5"])
        procs.append(proc)
        old = greedy(url, KEY)
        assert fingerprint(url, KEY) == "distllm-v1"
        assert sum(a != b for a, b in zip(old, ref_new)) >= 2, (old, ref_new)
        assert metric(url, "model_version") == 1

        # Bounded load while the directory is replaced.
        stop = threading.Event()
        failures, done = [], [0]
        lock = threading.Lock()

        def client(i):
            t0 = time.time()
            for n in range(200):
                if stop.is_set() or time.time() - t0 > 60:
                    break
                p = PROMPTS[(i + n) % len(PROMPTS)]
                try:
                    status, body = request(url, "/v1/completions",
                                           {"model": "m", "prompt": p, "max_tokens": 8, "temperature": 0}, KEY)
                    ok = status == 200
                except Exception as e:  # noqa: BLE001 - any transport error is a failure
                    ok, body = False, repr(e)
                with lock:
                    done[0] += 1
                    if not ok:
                        failures.append(body)
                time.sleep(0.01)

        threads = [threading.Thread(target=client, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        subprocess.run([make_model, model, "--family", "llama", "--tokenizer", "byte", "--seed", "2"], check=True,
                       stdout=subprocess.DEVNULL, timeout=60)
        deadline = time.time() + 30
        while metric(url, "model_version") != 2 and time.time() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)
        stop.set()
        for t in threads:
            t.join(timeout=90)
        assert metric(url, "model_version") == 2, open(log_path).read()
        assert metric(url, "model_reloads_total") == 1
        assert not failures, failures[:3]
        assert done[0] >= 10, done[0]
        assert greedy(url, KEY) == ref_new
        # Responses say which model version answered; the log has a line per request
        # and throughput lines while busy.
        assert fingerprint(url, KEY) == "distllm-v2"
        log = open(log_path).read()
        assert re.search(r"reloaded .* in [0-9.]+ s", log), log
        assert re.search(r"serve: request cmpl-\S+ \(completion\): (stop|length); prompt \d+ tokens \(\d+ cached\), "
                         r"completion \d+, [0-9.]+ s, distllm-v2", log), log[-3000:]
        assert re.search(r"serve: prompt [0-9.]+ tokens/s, generation [0-9.]+ tokens/s, running \d+, waiting \d+, "
                         r"KV cache [0-9.]+% used", log), log[-3000:]

        # The admin endpoint needs the key.
        status, body = request(url, "/admin/reload", None, None)
        assert status == 401, (status, body)
        status, body = request(url, "/admin/reload", None, KEY)
        assert status == 200 and json.loads(body)["version"] == 3, (status, body)
        assert greedy(url, KEY) == ref_new
        print(f"ok: {done[0]} requests during the reload, 0 failed")
        proc.terminate()
        proc.wait(timeout=60)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
