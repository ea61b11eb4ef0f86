"""A `rewind serve` child for the cache-tier benchmarks (disk_tier_bench.py, redis_tier_bench.py):
start on a free port, GET JSON, and one streamed completion timed to its first token; and what
the benchmarks share around it (their options, the model, waiting for a tier's writer)."""
import argparse, http.client, json, os, re, subprocess, threading, time

TIMEOUT_S = 1800


class Server:
    def __init__(self, binary, model, threads, ctx, extra):
        self.cmd = [binary, "serve", "--model", model, "--port", "0", "--threads", str(threads),
                    "--ctx-size", str(ctx), "--quiet"] + extra
        self.proc, self.port, self.t_spawn = None, None, None

    def start(self):
        self.t_spawn = time.time()
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, errors="replace")
        while True:
            line = self.proc.stdout.readline()
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                break
            if not line and self.proc.poll() is not None:
                raise RuntimeError("server did not start: " + " ".join(self.cmd))
        threading.Thread(target=lambda: [None for _ in self.proc.stdout], daemon=True).start()
        return time.time() - self.t_spawn

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=120)

    def get(self, path):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=TIMEOUT_S)
        c.request("GET", path)
        r = c.getresponse()
        body = r.read()
        c.close()
        return json.loads(body)

    def complete(self, ids):
        """(seconds from the request to its end, seconds to the first token, usage)."""
        body = {"prompt": ids, "max_tokens": 1, "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True}}
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=TIMEOUT_S)
        t0 = time.time()
        c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {r.read()[:300]!r}")
        first, usage = None, None
        for raw in r:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if ev.get("choices") and first is None:
                first = time.time()
            if ev.get("usage"):
                usage = ev["usage"]
        t1 = time.time()
        c.close()
        return t1 - t0, (first or t1) - t0, usage


def parse_args(doc, tokens):
    """The options every tier benchmark takes; --tokens defaults to `tokens`."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--rewind", required=True)
    ap.add_argument("--model", default="")
    ap.add_argument("--tokens", type=int, default=tokens)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    return ap.parse_args()


def model_and_vocab(rewind, model, work):
    """`model`, or the qwen3.5-mini preset made in `work` when it is empty, and its vocabulary
    size."""
    if not model:
        model = os.path.join(work, "model")
        subprocess.run([rewind, "make-model", "--preset", "qwen3.5-mini", "--out", model],
                       check=True, stdout=subprocess.DEVNULL)
    meta = json.load(open(os.path.join(model, "config.json")))
    return model, meta.get("vocab_size") or meta.get("text_config", {}).get("vocab_size")


def queue_drained(server, tier):
    """Waits (up to 300 s) until the tier ("disk", "redis") has nothing queued; its figures."""
    for _ in range(6000):
        st = server.get("/v1/cache")[tier]
        if st["queued"] == 0:
            break
        time.sleep(0.05)
    return st
