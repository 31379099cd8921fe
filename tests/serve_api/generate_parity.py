#!/usr/bin/env python3
"""Greedy (and seeded) output of `distllm serve` equals `distllm generate`'s for the
same prompt, whatever the batch around it.

usage: generate_parity.py DISTLLM_BINARY MODEL_DIR [FAMILY_LABEL]

The server runs with a small token budget (chunked prefill) and a small KV cache
(preemption), and every checked request shares the engine with concurrent noise
requests: long prompts, sampled outputs, streamed and non-streamed.
"""
import json
import subprocess
import sys
import threading
import time
import urllib.request

distllm, model = sys.argv[1], sys.argv[2]
label = sys.argv[3] if len(sys.argv) > 3 else model
MAX_TOKENS = 24

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "Once upon a time, in a land far away, there lived a dragon who",
    "1, 2, 3, 4, 5,",
    "A" * 5 + " quick brown fox " * 20,
    "Q: What is the meaning of life?\nA:",
]
SAMPLED = [("Tell me a story about", 0.8, 40, 0.9, 7), ("import numpy as np\n", 1.2, 0, 0.95, 123)]


def generate(prompt, temperature=0.0, top_k=0, top_p=1.0, seed=0):
    args = [distllm, "generate", "--model", model, "--prompt", prompt, "--max-tokens", str(MAX_TOKENS),
            "--temperature", str(temperature), "--top-k", str(top_k), "--top-p", str(top_p), "--seed", str(seed),
            "--ignore-eos", "--threads", "2"]
    out = subprocess.run(args, check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL).stdout.decode()
    assert out.endswith("\n")
    return out[:-1]


def post(port, body, timeout=120):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        data = r.read().decode()
    if body.get("stream"):
        text = ""
        for line in data.splitlines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunk = json.loads(line[6:])
                if chunk["choices"]:
                    text += chunk["choices"][0]["text"]
        return text
    return json.loads(data)["choices"][0]["text"]


def main():
    expected = [generate(p) for p in PROMPTS]
    expected_sampled = [generate(p, t, k, tp, s) for (p, t, k, tp, s) in SAMPLED]
    server = subprocess.Popen(
        [distllm, "serve", "--model", model, "--served-model-name", "m", "--port", "0", "--threads", "2", "--max-num-batched-tokens", "48",
         "--max-num-seqs", "6", "--kv-cache-memory", "0.00016", "--block-size", "8"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = server.stdout.readline().decode()
        assert "listening on" in line, line + server.stderr.read().decode()
        port = int(line.strip().rsplit(":", 1)[1])
        results, errors = {}, []

        def run(key, body):
            try:
                results[key] = post(port, body)
            except Exception as e:  # noqa: BLE001
                errors.append(f"{key}: {e}")

        threads = []
        for i, p in enumerate(PROMPTS):
            body = {"model": "m", "prompt": p, "max_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True,
                    "stream": i % 2 == 0}
            threads.append(threading.Thread(target=run, args=(("greedy", i), body)))
        for i, (p, t, k, tp, s) in enumerate(SAMPLED):
            body = {"model": "m", "prompt": p, "max_tokens": MAX_TOKENS, "temperature": t, "top_k": k, "top_p": tp,
                    "seed": s, "ignore_eos": True}
            threads.append(threading.Thread(target=run, args=(("sampled", i), body)))
        for i in range(4):  # noise: long prompts and unseeded sampling
            body = {"model": "m", "prompt": "noise " * (30 + 17 * i), "max_tokens": 30, "temperature": 1.0,
                    "ignore_eos": True, "stream": True}
            threads.append(threading.Thread(target=run, args=(("noise", i), body)))
        for t in threads:
            t.start()
            time.sleep(0.01)
        for t in threads:
            t.join()
        assert not errors, errors
        bad = 0
        for i, want in enumerate(expected):
            got = results[("greedy", i)]
            if got != want:
                bad += 1
                print(f"MISMATCH greedy prompt {i}:\n  generate: {want!r}\n  serve:    {got!r}")
        for i, want in enumerate(expected_sampled):
            got = results[("sampled", i)]
            if got != want:
                bad += 1
                print(f"MISMATCH seeded prompt {i}:\n  generate: {want!r}\n  serve:    {got!r}")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as r:
            metrics = r.read().decode()
        preempted = [l for l in metrics.splitlines() if l.startswith("distllm:num_preemptions")]
        print(f"{label}: {len(expected)} greedy + {len(expected_sampled)} seeded prompts compared; {preempted}")
        sys.exit(1 if bad else 0)
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
