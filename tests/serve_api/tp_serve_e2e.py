#!/usr/bin/env python3
"""`mpirun -np 2 distllm serve --tp 2` as processes, over real HTTP (loopback):

1. For a tiny random gpt2 and a llama with grouped-query attention (byte-level
   tokenizer): greedy completions of several prompts, sent concurrently (batched,
   sharing a prefix), equal those of a one-process server; again with a KV cache of
   4 blocks, where the requests preempt each other.
2. SIGTERM to rank 0: it drains, tells the other rank to stop, and every process
   (mpirun included) exits 0.
3. SIGTERM to mpirun: every rank exits.
4. A worker killed (SIGKILL) or hung (SIGSTOP): rank 0 does not hang; the job
   ends (non-zero) within the collective timeout.
5. --tp without mpirun, and a process count other than --tp: clear errors.

    tp_serve_e2e.py DISTLLM MAKE_TINY_MODEL MPIEXEC
"""
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

DISTLLM, MAKE_MODEL, MPIEXEC = sys.argv[1:4]
MPIRUN = [MPIEXEC, "--oversubscribe", "--allow-run-as-root", "--bind-to", "none"]
PROMPTS = ["The quick brown fox", "The quick brown dog jumps", "Hello", "0123456789 abc"]
ENV = dict(os.environ, DISTLLM_COMM_TIMEOUT="15", OMP_NUM_THREADS="1")


SERVERS = []  # every job started, so that a failure leaves none behind


def fail(msg, *logs):
    print("FAIL", msg)
    for log in logs:
        print(open(log, errors="replace").read()[-4000:])
    for server in SERVERS:
        server.kill()
    sys.exit(1)


class Server:
    def __init__(self, tmp, name, model, tp, flags=()):
        self.out, self.err = os.path.join(tmp, name + ".out"), os.path.join(tmp, name + ".err")
        cmd = [DISTLLM, "serve", "--model", model, "--port", "0", "--threads", "1", "--served-model-name", "m",
               *(flags or ["--kv-cache-memory", "0.01"])]
        if tp > 1:
            cmd = MPIRUN + ["-np", str(tp)] + cmd + ["--tp", str(tp)]
        self.proc = subprocess.Popen(cmd, stdout=open(self.out, "w"), stderr=open(self.err, "w"), env=ENV,
                                     start_new_session=True)
        SERVERS.append(self)
        self.port = None
        for _ in range(600):
            text = open(self.out).read()
            if "listening on" in text:
                self.port = int(text.split("listening on")[1].split()[0].rsplit(":", 1)[1])
                break
            if self.proc.poll() is not None:
                fail(f"{name} exited with {self.proc.returncode} before listening", self.err)
            time.sleep(0.05)
        if self.port is None:
            self.kill()
            fail(f"{name} did not start", self.err)

    def ranks(self):
        """{rank: pid} of this job's distllm processes (their MPI environment)."""
        out = {}
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
                if os.getsid(int(pid)) != self.proc.pid or not open(f"/proc/{pid}/cmdline", "rb").read().startswith(
                        DISTLLM.encode()):
                    continue
            except (OSError, ProcessLookupError):
                continue
            for kv in env:
                if kv.startswith(b"OMPI_COMM_WORLD_RANK="):
                    out[int(kv.split(b"=")[1])] = int(pid)
        return out

    def request(self, prompt, timeout=60):
        """(HTTP status, body) of a greedy completion."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        body = {"model": "m", "prompt": prompt, "max_tokens": 24, "temperature": 0}
        c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, r.read()

    def complete(self, prompt):
        status, data = self.request(prompt)
        if status != 200:
            fail(f"HTTP {status}: {data!r}", self.err)
        return json.loads(data)["choices"][0]["text"]

    def complete_all(self):
        """Every prompt at once, so the engine batches them."""
        out = [None] * len(PROMPTS)

        def one(i):
            out[i] = self.complete(PROMPTS[i])

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(PROMPTS))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
        return out

    def wait(self, timeout):
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            fail(f"still running {timeout} s later", self.err)

    def kill(self):
        """Ends the whole job (mpirun and its ranks share its session)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


def gone(pids, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not any(os.path.exists(f"/proc/{p}") and open(f"/proc/{p}/stat").read().split()[2] != "Z" for p in pids):
            return True
        time.sleep(0.1)
    return False


def main():
    tmp = tempfile.mkdtemp()
    try:
        for family, flags in (("gpt2", []), ("llama", ["--family", "llama"])):
            model = os.path.join(tmp, family)
            subprocess.run([MAKE_MODEL, model, "--tokenizer", "byte", *flags], check=True, stdout=subprocess.DEVNULL)
            one = Server(tmp, family + "-tp1", model, 1)
            want = one.complete_all()
            if not all(want):
                fail(f"{family}: empty completions from tp=1: {want!r}", one.err)
            one.proc.send_signal(signal.SIGTERM)
            one.wait(30)
            two = Server(tmp, family + "-tp2", model, 2)
            got = two.complete_all()
            if got != want:
                two.kill()
                fail(f"{family}: tp=2 greedy outputs differ:\n  tp=1 {want!r}\n  tp=2 {got!r}", two.err)
            print(f"ok   {family}: tp=2 greedy completions equal tp=1's ({len(PROMPTS)} prompts, batched)")
            # 2. SIGTERM to rank 0 stops every rank.
            ranks = two.ranks()
            if sorted(ranks) != [0, 1]:
                two.kill()
                fail(f"expected ranks 0 and 1, found {ranks}", two.err)
            os.kill(ranks[0], signal.SIGTERM)
            rc = two.wait(60)
            if rc != 0 or not gone(ranks.values(), 10):
                fail(f"{family}: after SIGTERM to rank 0 mpirun exited {rc}", two.err)
            log = open(two.err).read()
            if "tensor-parallel rank 1 stopped" not in log:
                fail("rank 1 did not log its stop", two.err)
            print(f"ok   {family}: SIGTERM to rank 0: every rank exited, status 0")

            # The same under preemption: 4 blocks of 16 tokens (one request of up to 49
            # tokens fits) for 4 requests at once. A block holds 2 layers x (K, V) x 16
            # tokens x this rank's K/V width (2 of gpt2's 4 heads of 16, 1 of llama's 2)
            # in f32. Requests that happen not to overlap preempt nothing: the batch is
            # sent again (at most 5 times) until one has been preempted.
            block_bytes = 2 * 2 * 16 * (32 if family == "gpt2" else 16) * 4
            small = Server(tmp, family + "-tp2-small", model, 2,
                           ["--kv-cache-memory", repr(4 * block_bytes / 2**30), "--max-model-len", "64"])
            if "engine: 4 KV blocks" not in open(small.err).read():
                small.kill()
                fail(f"{family}: expected a cache of 4 blocks", small.err)
            preempted = "0"
            for _ in range(5):
                got = small.complete_all()
                if got != want:
                    small.kill()
                    fail(f"{family}: with 4 KV blocks got {got!r}, want {want!r}", small.err)
                c = http.client.HTTPConnection("127.0.0.1", small.port, timeout=30)
                c.request("GET", "/metrics")
                lines = c.getresponse().read().decode().splitlines()
                preempted = [l for l in lines if l.startswith("distllm:num_preemptions_total")][0].split()[-1]
                if float(preempted) >= 1:
                    break
            small.proc.send_signal(signal.SIGTERM)
            small.wait(60)
            if float(preempted) < 1:
                fail(f"{family}: 5 batches on 4 KV blocks preempted nothing", small.err)
            print(f"ok   {family}: equal again with 4 KV blocks ({preempted} preemptions)")
        model = os.path.join(tmp, "gpt2")
        # 3. SIGTERM to mpirun.
        s = Server(tmp, "mpirun-term", model, 2)
        ranks = s.ranks()
        s.proc.send_signal(signal.SIGTERM)
        s.wait(60)
        if not gone(ranks.values(), 10):
            fail("ranks still running after mpirun was terminated", s.err)
        print("ok   SIGTERM to mpirun: every rank exited")
        # 4. A lost worker: the job ends instead of hanging. Killed, mpirun notices;
        # stopped (hung), rank 0's next collective times out (DISTLLM_COMM_TIMEOUT=15)
        # and it ends the job itself, naming the failure.
        for how in (signal.SIGKILL, signal.SIGSTOP):
            s = Server(tmp, f"lost-rank-{how.name}", model, 2)
            ranks = s.ranks()
            os.kill(ranks[1], how)
            t0 = time.time()
            try:  # the request fails or is never answered: only the exit matters
                s.request("after the worker was lost", timeout=45)
            except (OSError, http.client.HTTPException):
                pass
            rc = s.wait(60)
            took = time.time() - t0
            if rc == 0 or not gone(ranks.values(), 10):
                fail(f"lost worker ({how.name}): mpirun exited {rc}", s.err)
            if how == signal.SIGSTOP and "tensor-parallel serving lost a rank" not in open(s.err).read():
                fail("a hung worker: rank 0 did not name the failure", s.err)
            print(f"ok   a worker lost by {how.name} ends the job in {took:.1f} s (status {rc})")
        # 5. Bad launches.
        r = subprocess.run([DISTLLM, "serve", "--model", model, "--tp", "2"], capture_output=True, text=True,
                           timeout=60, env=ENV)
        if r.returncode == 0 or "mpirun -np 2" not in r.stderr:
            fail(f"--tp 2 without mpirun: status {r.returncode}, {r.stderr!r}")
        r = subprocess.run(MPIRUN + ["-np", "2", DISTLLM, "serve", "--model", model, "--port", "0"],
                           capture_output=True, text=True, timeout=60, env=ENV)
        if r.returncode == 0 or "--tp 1 but the launcher started 2 processes" not in r.stderr:
            fail(f"2 processes without --tp: status {r.returncode}, {r.stderr!r}")
        print("ok   --tp without mpirun and a process count other than --tp are refused")
    finally:
        for server in SERVERS:
            if server.proc.poll() is None:
                server.kill()
        shutil.rmtree(tmp, ignore_errors=True)


main()
