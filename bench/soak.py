#!/usr/bin/env python3
"""Soak test for `rewind serve` (loopback only, bounded in count and time).

Starts its own server (the one under test) on a free 127.0.0.1 port and sends N requests from C
concurrent clients, a seeded mix of:
  new conversations, extensions through the previous reply, edits of an earlier user turn,
  repeats of an earlier request, client-side cancellations mid-stream, streamed and whole chat
  completions and text completions,
  slow clients (headers and body sent in pieces with pauses, replies read in small pieces),
  misbehaving clients (malformed JSON, wrong field types, garbage bytes, a body cut short by a
  disconnect, headers that never end).
Every generation is greedy (temperature 0). A sample of the finished replies is then replayed on
a fresh `--no-cache` server and compared byte for byte. The server's resident set (VmRSS) is
sampled every --rss-interval seconds and compared with the memory bound the server prints at
start-up (rewind_memory_bound_bytes in /metrics, docs/ARCHITECTURE.md "Memory").

Reports errors by kind (a misbehaving client's 4xx or closed connection is expected; a 5xx, a
hang or a crash never is), mismatches, latency percentiles (time to first token and total),
requests/s, peak and final RSS against the bound. Exits 1 on any mismatch, unexpected error,
server crash or RSS above the bound; 2 on a usage or start-up error.

usage: bench/soak.py [--binary build/release/rewind] [--requests 300] [--concurrency 8]
                     [--seed 1] [--compare 0.1] [--server-arg=--cache-ram=64 ...]
Standard library only (python3)."""
import argparse, http.client, json, os, random, re, signal, socket, subprocess, sys, threading, time

WORDS = ("in the beginning god created heaven and earth light darkness waters spirit day night "
         "firmament land sea grass seed fruit tree lord said let there be was good evening morning "
         "man woman garden river gold stone king house people son father mother brother city").split()

MIB = 1 << 20


def sentence(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def pct(values, p):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


# ---------------------------------------------------------------------------------- server

class Server:
    """A `rewind serve` child on an ephemeral port; stderr is kept (the bound line)."""

    def __init__(self, binary, args, name):
        self.name = name
        self.proc = subprocess.Popen([binary, "serve", "--host", "127.0.0.1", "--port", "0"] + args,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.stderr_lines = []
        threading.Thread(target=self._drain_err, daemon=True).start()
        deadline = time.time() + 120
        self.port = None
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                threading.Thread(target=lambda: [None for _ in self.proc.stdout], daemon=True).start()
                break
            if self.proc.poll() is not None:
                break
        if self.port is None:
            self.stop()
            sys.stderr.write(f"soak: {name} server did not start:\n" + "".join(self.stderr_lines))
            sys.exit(2)

    def _drain_err(self):
        for line in self.proc.stderr:
            self.stderr_lines.append(line)

    def alive(self):
        return self.proc.poll() is None

    def rss(self):
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return None

    def get(self, path, timeout=30):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request("GET", path)
            r = c.getresponse()
            return r.status, r.read().decode("utf-8", "replace")
        finally:
            c.close()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def metric(text, name, labels=None):
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$", line)
        if m and m.group(1) == name and (labels is None or (m.group(2) or "") == labels):
            return float(m.group(3))
    return None


def memory_kinds(text):
    out = {}
    for line in text.splitlines():
        m = re.match(r'^rewind_memory_bytes\{kind="([^"]+)"\}\s+(\S+)$', line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


# ---------------------------------------------------------------------------------- requests

class Outcome:
    def __init__(self, kind):
        self.kind = kind          # the operation
        self.status = None        # HTTP status, or None when the connection closed first
        self.error = None         # unexpected: a string saying what
        self.ttft = None
        self.total = None
        self.text = None          # the reply text (finished greedy generations)
        self.compare = None       # (path, body) to replay on the reference server


def post(port, path, body, timeout):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", path, body, {"Content-Type": "application/json"})
    return c, c.getresponse()


def read_stream(resp, chat, cancel_after=None, slow=False):
    """Reads an SSE body; returns (ttft_time or None, text, finished, chunks)."""
    ttft, parts, done, chunks = None, [], False, 0
    while True:
        raw = resp.fp.readline() if not slow else slow_readline(resp)
        if not raw:
            break
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data: "):
            continue
        if line == "data: [DONE]":
            done = True
            break
        ev = json.loads(line[6:])
        if "error" in ev:
            raise RuntimeError("stream error event: " + json.dumps(ev)[:200])
        for ch in ev.get("choices", []):
            piece = ch.get("delta", {}).get("content") if chat else ch.get("text")
            if piece:
                if ttft is None:
                    ttft = time.time()
                parts.append(piece)
                chunks += 1
        if cancel_after is not None and chunks >= cancel_after:
            return ttft, "".join(parts), False, chunks
    return ttft, "".join(parts), done, chunks


def slow_readline(resp):
    out = b""
    while not out.endswith(b"\n"):
        b = resp.fp.read(1)
        if not b:
            break
        out += b
        if len(out) % 16 == 0:
            time.sleep(0.002)
    return out


def generation(port, o, path, payload, timeout, cancel_after=None, slow=False):
    chat = path.endswith("chat/completions")
    body = json.dumps(payload)
    t0 = time.time()
    c = None
    try:
        c, r = post(port, path, body, timeout)
        o.status = r.status
        if r.status != 200:
            o.error = f"HTTP {r.status}: {r.read()[:160]!r}"
            return
        if payload.get("stream"):
            ttft, text, done, _ = read_stream(r, chat, cancel_after, slow)
            o.ttft = None if ttft is None else ttft - t0
            if cancel_after is not None and not done:
                return  # closed below, mid-stream: the server cancels
            if not done:
                o.error = "stream ended without [DONE]"
                return
            o.text = text
        else:
            j = json.loads(r.read())
            ch = j["choices"][0]
            o.text = ch["message"].get("content") or "" if chat else ch["text"]
            o.ttft = time.time() - t0
        o.total = time.time() - t0
        if o.text is not None:
            ref = dict(payload)
            ref["stream"] = False
            ref.pop("stream_options", None)
            o.compare = (path, json.dumps(ref))
    except (OSError, http.client.HTTPException, ValueError, KeyError, RuntimeError) as e:
        o.error = f"{type(e).__name__}: {e}"
    finally:
        if c is not None:
            c.close()


def raw_exchange(port, chunks, pause, read_timeout, read=True):
    """Sends byte chunks with pauses; returns the status code of the reply, or None when the
    server closed the connection without one."""
    s = socket.create_connection(("127.0.0.1", port), timeout=read_timeout)
    try:
        for i, ch in enumerate(chunks):
            if i:
                time.sleep(pause)
            s.sendall(ch)
        if not read:
            return None
        data = b""
        while b"\r\n" not in data:
            b = s.recv(4096)
            if not b:
                break
            data += b
        m = re.match(rb"HTTP/1\.[01] (\d{3})", data)
        return int(m.group(1)) if m else None
    finally:
        s.close()


def http_request_bytes(path, body, extra_headers=""):
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n{extra_headers}\r\n").encode() + body


# ---------------------------------------------------------------------------------- clients

class Client:
    """One concurrent client: its own conversations and seeded choices."""

    def __init__(self, idx, args, port, system):
        self.rng = random.Random(args.seed * 100003 + idx)
        self.args, self.port, self.system = args, port, system
        self.convs = []      # each: list of messages
        self.history = []    # (path, payload) of earlier requests, for repeats

    def params(self, stream):
        p = {"max_tokens": self.rng.randint(4, self.args.max_tokens), "temperature": 0,
             "stream": stream}
        if stream and self.rng.random() < 0.5:
            p["stream_options"] = {"include_usage": True}
        return p

    def user_text(self):
        return " ".join(sentence(self.rng, self.rng.randint(4, 12)) for _ in range(self.rng.randint(1, 3)))

    def new_conv(self):
        msgs = [{"role": "system", "content": self.system}] if self.rng.random() < 0.7 else []
        msgs.append({"role": "user", "content": self.user_text()})
        self.convs.append(msgs)
        if len(self.convs) > 6:
            self.convs.pop(0)
        return msgs

    def chat(self, o, msgs, stream, cancel_after=None, slow=False):
        payload = dict(self.params(stream), messages=msgs)
        generation(self.port, o, "/v1/chat/completions", payload, self.args.timeout, cancel_after, slow)
        if o.error is None and cancel_after is None:
            self.history.append(("/v1/chat/completions", payload))
        return o.text

    def run_one(self, op):
        o = Outcome(op)
        rng = self.rng
        stream = rng.random() < 0.5
        if op == "new":
            self.chat(o, self.new_conv(), stream)
        elif op == "extend":
            if not self.convs:
                self.new_conv()
            msgs = rng.choice(self.convs)
            o2 = Outcome(op)
            reply = self.chat(o2, msgs, False)
            if o2.error:
                return o2
            if len(msgs) > 16:  # bounded conversations: start over
                del msgs[1:]
            msgs += [{"role": "assistant", "content": reply}, {"role": "user", "content": self.user_text()}]
            self.chat(o, msgs, stream)
        elif op == "edit":
            if not self.convs:
                self.new_conv()
            msgs = rng.choice(self.convs)
            users = [i for i, m in enumerate(msgs) if m["role"] == "user"]
            k = rng.choice(users)
            edited = [dict(m) for m in msgs[:k + 1]]
            edited[k]["content"] = sentence(rng, 5) + " " + edited[k]["content"]
            self.convs.append(edited)
            self.chat(o, edited, stream)
        elif op == "repeat":
            if not self.history:
                self.chat(o, self.new_conv(), stream)
            else:
                path, payload = rng.choice(self.history)
                payload = dict(payload, stream=stream)
                if not stream:
                    payload.pop("stream_options", None)
                generation(self.port, o, path, payload, self.args.timeout)
        elif op == "cancel":
            msgs = rng.choice(self.convs) if self.convs else self.new_conv()
            payload = dict(self.params(True), messages=msgs, max_tokens=self.args.max_tokens + 32,
                           ignore_eos=True)
            generation(self.port, o, "/v1/chat/completions", payload, self.args.timeout,
                       cancel_after=rng.randint(1, 4))
        elif op == "completion":
            prompt = " ".join(sentence(rng, rng.randint(5, 14)) for _ in range(rng.randint(1, 4)))
            payload = dict(self.params(stream), prompt=prompt)
            generation(self.port, o, "/v1/completions", payload, self.args.timeout)
            if o.error is None:
                self.history.append(("/v1/completions", payload))
        elif op == "slow_send":
            # Headers and body in small pieces with pauses (about a second in all), then a whole reply.
            msgs = self.new_conv()
            body = json.dumps(dict(self.params(False), messages=msgs)).encode()
            data = http_request_bytes("/v1/chat/completions", body, "Connection: close\r\n")
            step = max(1, len(data) // 20)
            t0 = time.time()
            try:
                o.status = raw_exchange(self.port, [data[i:i + step] for i in range(0, len(data), step)],
                                        0.05, self.args.timeout)
                o.total = time.time() - t0
                if o.status != 200:
                    o.error = f"slow sender got {o.status}"
            except OSError as e:
                o.error = f"slow sender: {e}"
        elif op == "slow_read":
            self.chat(o, rng.choice(self.convs) if self.convs else self.new_conv(), True, slow=True)
        elif op in ("bad_json", "bad_type", "garbage", "cut_body", "slowloris"):
            self.misbehave(o, op)
        else:
            raise AssertionError(op)
        return o

    def misbehave(self, o, op):
        """Expected: a 4xx (408 included) or a closed connection; never a 5xx or a hang."""
        rng = self.rng
        try:
            if op == "bad_json":
                o.status = raw_exchange(self.port, [http_request_bytes(
                    "/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}', "Connection: close\r\n")],
                    0, self.args.timeout)
            elif op == "bad_type":
                o.status = raw_exchange(self.port, [http_request_bytes(
                    "/v1/completions", json.dumps({"prompt": 5, "max_tokens": "many"}).encode(),
                    "Connection: close\r\n")], 0, self.args.timeout)
            elif op == "garbage":
                junk = bytes(rng.randrange(256) for _ in range(rng.randint(16, 2048)))
                o.status = raw_exchange(self.port, [junk, b"\r\n\r\n"], 0, self.args.timeout)
            elif op == "cut_body":
                body = json.dumps({"messages": [{"role": "user", "content": self.user_text()}]}).encode()
                data = http_request_bytes("/v1/chat/completions", body)
                raw_exchange(self.port, [data[:len(data) - len(body) // 2]], 0, 5, read=False)
                o.status = None
            elif op == "slowloris":
                # Headers that never end: a few lines over about two seconds, then give up.
                chunks = [b"POST /v1/chat/completions HTTP/1.1\r\n", b"Host: 127.0.0.1\r\n",
                          b"X-Slow: 1\r\n", b"X-Slow: 2\r\n"]
                s = socket.create_connection(("127.0.0.1", self.port), timeout=self.args.timeout)
                try:
                    for ch in chunks:
                        s.sendall(ch)
                        time.sleep(0.5)
                except OSError:
                    pass  # the server closed it first: fine
                finally:
                    s.close()
                o.status = None
        except (socket.timeout, TimeoutError) as e:
            o.error = f"{op}: no answer within {self.args.timeout} s ({e})"
            return
        except OSError:
            o.status = None  # closed by the server: fine
        if o.status is not None and not (400 <= o.status < 500):
            o.error = f"{op}: HTTP {o.status} (expected a 4xx or a closed connection)"


MIX = [("new", 14), ("extend", 18), ("edit", 10), ("repeat", 10), ("cancel", 8), ("completion", 12),
       ("slow_send", 2), ("slow_read", 3), ("bad_json", 2), ("bad_type", 2), ("garbage", 2),
       ("cut_body", 2), ("slowloris", 1)]
MISBEHAVING = {"bad_json", "bad_type", "garbage", "cut_body", "slowloris"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--binary", default=os.path.join(root, "build", "release", "rewind"))
    ap.add_argument("--requests", "-n", type=int, default=300)
    ap.add_argument("--concurrency", "-c", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--compare", type=float, default=0.1,
                    help="fraction of finished greedy replies replayed on a --no-cache server")
    ap.add_argument("--timeout", type=float, default=120, help="seconds any one request may take")
    ap.add_argument("--rss-interval", type=float, default=0.5)
    ap.add_argument("--threads", type=int, default=2, help="--threads of both servers")
    ap.add_argument("--server-arg", action="append", default=[],
                    help="extra argument for the server under test (repeat; e.g. --server-arg=--cache-ram=64)")
    ap.add_argument("--json", help="write the report as JSON to this file too")
    args = ap.parse_args()
    if args.requests < 1 or args.concurrency < 1:
        ap.error("--requests and --concurrency must be >= 1")
    server_args = []
    for a in args.server_arg:
        server_args += a.split("=", 1) if a.startswith("--") and "=" in a else [a]
    base = ["--threads", str(args.threads)]
    if "--model" not in server_args and os.environ.get("REWIND_SOAK_MODEL"):
        base += ["--model", os.environ["REWIND_SOAK_MODEL"]]

    srv = Server(args.binary, base + server_args, "test")
    bound_line = next((l.strip() for l in srv.stderr_lines if "memory bound" in l), None)
    rss = []  # (t, bytes)
    stop = threading.Event()

    def sampler():
        while not stop.is_set():
            v = srv.rss()
            if v is not None:
                rss.append((time.time(), v))
            stop.wait(args.rss_interval)

    threading.Thread(target=sampler, daemon=True).start()
    rng = random.Random(args.seed)
    system = " ".join(sentence(rng, 12) for _ in range(8))
    ops = [op for op, w in MIX for _ in range(w)]
    plan = [rng.choice(ops) for _ in range(args.requests)]
    outcomes, lock, nxt = [], threading.Lock(), [0]
    abort = threading.Event()

    def worker(i):
        cl = Client(i, args, srv.port, system)
        while True:
            with lock:
                if nxt[0] >= len(plan) or abort.is_set():
                    return
                op = plan[nxt[0]]
                nxt[0] += 1
            o = cl.run_one(op)
            with lock:
                outcomes.append(o)

    t0 = time.time()
    workers = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(args.concurrency)]
    for w in workers:
        w.start()
    # Hung: no request finished for longer than one request may take (plus a margin).
    hung, seen, last_progress = False, 0, time.time()
    while any(w.is_alive() for w in workers):
        time.sleep(0.2)
        with lock:
            n_done = len(outcomes)
        if n_done != seen:
            seen, last_progress = n_done, time.time()
        elif time.time() - last_progress > args.timeout + 30:
            hung = True
            abort.set()
            break
    wall = time.time() - t0
    alive = srv.alive()
    health = None
    metrics_text = ""
    if alive:
        try:
            health = srv.get("/health")[0]
            metrics_text = srv.get("/metrics")[1]
        except (OSError, http.client.HTTPException) as e:
            health = f"{e}"
    time.sleep(args.rss_interval)
    stop.set()
    final_rss = srv.rss()
    bound = metric(metrics_text, "rewind_memory_bound_bytes")
    kinds = memory_kinds(metrics_text)
    rc_test = srv.stop()

    # Replay a sample of finished replies on a fresh --no-cache server, byte for byte.
    done = [o for o in outcomes if o.compare is not None]
    n_cmp = min(len(done), max(1, int(round(args.compare * len(done))))) if done and args.compare > 0 else 0
    sample = random.Random(args.seed + 1).sample(done, n_cmp)
    mismatches = []
    if sample:
        ref_args = [a for a in server_args]
        ref = Server(args.binary, base + ref_args + ["--no-cache"], "reference")
        try:
            for o in sample:
                r = Outcome("reference")
                path, body = o.compare
                generation(ref.port, r, path, json.loads(body), args.timeout)
                if r.error or r.text != o.text:
                    mismatches.append({"kind": o.kind, "path": path, "request": body[:300],
                                       "got": o.text, "reference": r.text, "error": r.error})
        finally:
            ref.stop()

    errors = {}
    for o in outcomes:
        if o.error:
            errors.setdefault(o.kind, []).append(o.error)
    by_kind = {}
    for o in outcomes:
        by_kind[o.kind] = by_kind.get(o.kind, 0) + 1
    ttft = [o.ttft for o in outcomes if o.ttft is not None and o.kind not in MISBEHAVING]
    total = [o.total for o in outcomes if o.total is not None and o.kind not in MISBEHAVING]
    peak = max((v for _, v in rss), default=None)
    report = {
        "requests": len(outcomes), "planned": args.requests, "concurrency": args.concurrency,
        "seed": args.seed, "server_args": server_args, "wall_s": round(wall, 2),
        "requests_per_s": round(len(outcomes) / wall, 2) if wall > 0 else None,
        "by_kind": by_kind,
        "errors": {k: {"count": len(v), "first": v[0]} for k, v in errors.items()},
        "compared": len(sample), "mismatches": len(mismatches),
        "ttft_ms": {p: round(1000 * pct(ttft, int(p[1:])), 1) for p in ("p50", "p90", "p99")},
        "total_ms": {p: round(1000 * pct(total, int(p[1:])), 1) for p in ("p50", "p90", "p99")},
        "rss_mib": {"peak": peak and round(peak / MIB, 1), "final": final_rss and round(final_rss / MIB, 1),
                    "samples": len(rss)},
        "bound_mib": bound and round(bound / MIB, 1), "bound_line": bound_line,
        "memory_bytes_at_end": kinds,
        "server_alive": alive, "health": health, "hung_clients": hung, "server_exit": rc_test,
    }
    print(json.dumps(report, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(report, mismatch_detail=mismatches[:5], rss_series=[v for _, v in rss]), f)
    failures = []
    if mismatches:
        failures.append(f"{len(mismatches)} mismatch(es); first: {json.dumps(mismatches[0])[:600]}")
    if errors:
        failures.append(f"unexpected errors: {json.dumps(report['errors'])[:800]}")
    if not alive or health != 200:
        failures.append(f"server down at the end (alive {alive}, /health {health}):\n" +
                        "".join(srv.stderr_lines[-20:]))
    if hung:
        failures.append(f"no request finished for {args.timeout + 30:.0f} s: clients hung")
    if len(outcomes) != args.requests:
        failures.append(f"{len(outcomes)} of {args.requests} requests ran")
    if bound is None:
        failures.append("no rewind_memory_bound_bytes in /metrics")
    elif peak is not None and peak > bound:
        failures.append(f"peak RSS {peak / MIB:.1f} MiB above the bound {bound / MIB:.1f} MiB")
    if rc_test not in (0, None):
        failures.append(f"server exit status {rc_test}")
    for f in failures:
        print("soak: FAIL: " + f, file=sys.stderr)
    if not failures:
        print("soak: ok", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
