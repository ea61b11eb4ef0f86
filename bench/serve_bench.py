#!/usr/bin/env python3
"""Serving benchmark: N concurrent streaming chat clients against `rewind serve` and, when a
llama.cpp server binary is given, against llama-server on the same GGUF file (loopback only,
bounded in time).

Starts each server itself (rewind on --port 0, llama-server on a free port), both up for the
whole run, and stops them at the end; --rewind-b / --rewind-b-arg add a second rewind server
(another binary, or the same one with other options) run the same way. For each prompt kind
(short, long) and each client count it runs one cell per server, the servers alternately (so a
change in the machine's load falls on both):
C clients start together, each sends --requests POST /v1/chat/completions (--endpoint
completions: /v1/completions) with "stream": true, greedy, "ignore_eos": true and "max_tokens" M,
one after the other. Every prompt is new (a
request number first, then seeded random words), so no server reuses a cached prefix beyond the
chat template's first tokens; both servers get the same prompts.

Per cell: aggregate tok/s (completion tokens of all requests / the cell's wall time), the
aggregate decode tok/s (C clients / the mean gap between streamed tokens: the tokens after each
request's first over the time they took, times C; beside it, its ratio to the 1-client cell of
the same server and prompts when that cell ran), time to first token (request sent -> first
streamed token) and inter-token latency (gaps between successive streamed token chunks) p50 / p90
/ p99 over all requests of the cell, pooled over the --rounds. With --rounds > 1 tok/s and
decode tok/s are the medians of the rounds.

Every reply is checked: HTTP 200, an event stream of "data: " JSON chunks (object
chat.completion.chunk or text_completion, one id, choices with index 0 and a delta or a text), at
least one token, one
finish_reason "length", a usage chunk with completion_tokens == max_tokens, then "data: [DONE]"
and nothing after. A malformed reply, a failed request or a server that does not start exits 1.

usage: bench/serve_bench.py [--rewind build/release/rewind] [--model FILE.gguf]
                            [--llama-server PATH] [--clients 1,2,4,8,16] [--prompts short,long]
                            [--short-words 16] [--long-words 384] [--max-tokens 64]
                            [--requests 2] [--rounds 1] [--threads 2] [--ctx-size 2048]
                            [--endpoint chat|completions] [--rewind-arg=ARG ...]
                            [--llama-arg=ARG ...] [--rewind-b BINARY] [--rewind-b-arg=ARG ...]
                            [--json]
       bench/serve_bench.py --self-test      (the stream checker against malformed streams)
Without --model rewind serves its built-in model (and --llama-server is refused). Prints a
Markdown table (--json: one JSON object instead). Standard library only (python3).

A streamed chat reply that is whitespace only (what seeded random weights often produce)
reaches llama-server's client as no content at all (its chat parser holds trailing whitespace
back), which this checker refuses ("no token streamed"); --endpoint completions streams the
raw text on both servers."""
import argparse, http.client, json, os, platform, random, subprocess, sys, threading, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_process import ServerProcess, free_port  # noqa: E402

WORDS = ("the sea light keeper storm ship harbour night lamp rock wave wind island coast winter "
         "north bell fog tide stone tower signal sailor voyage rope deck cold river mountain road "
         "village market bread fire smoke window garden letter morning evening summer autumn").split()


class StreamError(Exception):
    """A reply that is not a well-formed chat completion stream."""


def pct(values, p):
    """The p-th percentile (linear between closest ranks); None for no values."""
    if not values:
        return None
    v = sorted(values)
    x = p / 100.0 * (len(v) - 1)
    lo = int(x)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (x - lo)


def median(values):
    return pct(values, 50)


# ---------------------------------------------------------------------------------- the stream

def check_stream(lines, max_tokens, chat=True):
    """Checks one streamed chat completion (chat=False: text completion). `lines` is
    [(arrival_s, text)] of the body's lines (without line ends). Returns dict(token_times,
    completion_tokens, prompt_tokens); raises StreamError saying what is wrong."""
    want = "chat.completion.chunk" if chat else "text_completion"
    token_times, finish, usage, ids, done = [], [], None, set(), False
    for t, line in lines:
        if line == "" or line.startswith(":"):  # event separator, SSE comment
            continue
        if done:
            raise StreamError(f"data after [DONE]: {line[:80]!r}")
        if not line.startswith("data: "):
            raise StreamError(f"not a data line: {line[:80]!r}")
        payload = line[6:]
        if payload == "[DONE]":
            done = True
            continue
        try:
            ev = json.loads(payload)
        except ValueError:
            raise StreamError(f"not JSON: {payload[:80]!r}") from None
        if not isinstance(ev, dict):
            raise StreamError(f"a chunk is not an object: {payload[:80]!r}")
        if "error" in ev:
            raise StreamError(f"error chunk: {json.dumps(ev['error'])[:200]}")
        if ev.get("object") != want:
            raise StreamError(f"object is {ev.get('object')!r}, not {want}")
        if not isinstance(ev.get("id"), str):
            raise StreamError("a chunk without a string id")
        ids.add(ev["id"])
        choices = ev.get("choices")
        if not isinstance(choices, list):
            raise StreamError("a chunk without a choices list")
        for ch in choices:
            if not isinstance(ch, dict) or ch.get("index") != 0:
                raise StreamError(f"a choice that is not index 0: {json.dumps(ch)[:80]}")
            text = ""
            if chat:
                delta = ch.get("delta")
                if not isinstance(delta, dict):
                    raise StreamError("a choice without a delta object")
                for key in ("content", "reasoning_content"):
                    v = delta.get(key)
                    if v is not None and not isinstance(v, str):
                        raise StreamError(f"delta.{key} is not a string")
                    text += v or ""
            else:
                text = ch.get("text")
                if not isinstance(text, str):
                    raise StreamError("a choice without a text string")
            if text:
                if finish:
                    raise StreamError("a token after the finish_reason")
                token_times.append(t)
            if ch.get("finish_reason") is not None:
                finish.append(ch["finish_reason"])
        if ev.get("usage") is not None:
            if usage is not None:
                raise StreamError("two usage chunks")
            usage = ev["usage"]
    if not done:
        raise StreamError("the stream did not end with data: [DONE]")
    if len(ids) != 1:
        raise StreamError(f"{len(ids)} chunk ids in one stream")
    if not token_times:
        raise StreamError("no token streamed")
    if finish != ["length"]:
        raise StreamError(f"finish_reason {finish}, expected ['length'] (ignore_eos, max_tokens)")
    if not isinstance(usage, dict):
        raise StreamError("no usage chunk")
    ct, pt = usage.get("completion_tokens"), usage.get("prompt_tokens")
    if not isinstance(ct, int) or not isinstance(pt, int) or pt < 1:
        raise StreamError(f"malformed usage {json.dumps(usage)[:120]}")
    if ct != max_tokens:
        raise StreamError(f"usage.completion_tokens {ct}, asked for {max_tokens}")
    if len(token_times) > ct:
        raise StreamError(f"{len(token_times)} token chunks for {ct} completion tokens")
    return {"token_times": token_times, "completion_tokens": ct, "prompt_tokens": pt}


def self_test():
    """The checker accepts a well-formed stream and refuses each kind of malformed one."""
    def chunk(content=None, finish=None, usage=None, cid="c1", obj="chat.completion.chunk", idx=0):
        choices = [] if usage is not None else [{"index": idx, "delta": {} if content is None else
                                                 {"content": content}, "finish_reason": finish}]
        ev = {"id": cid, "object": obj, "choices": choices}
        if usage is not None:
            ev["usage"] = usage
        return "data: " + json.dumps(ev)

    u = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
    good = [chunk("a"), "", chunk("b"), "", chunk(finish="length"), "", chunk(usage=u), "",
            "data: [DONE]", ""]
    # name -> (lines, words the refusal must contain)
    cases = {
        "no [DONE]": (good[:-2], "did not end"),
        "data after [DONE]": (good + [chunk("c")], "after [DONE]"),
        "not a data line": (["event: x"] + good, "not a data line"),
        "not JSON": (["data: {\"id\": "] + good, "not JSON"),
        "not an object": (["data: [1, 2]"] + good, "not an object"),
        "an error chunk": (["data: {\"error\": {\"message\": \"boom\"}}"] + good, "error chunk"),
        "wrong object": ([chunk("a", obj="text_completion")] + good[1:], "not chat.completion.chunk"),
        "two ids": ([chunk("a", cid="c2")] + good[1:], "chunk ids"),
        "no token": ([chunk(finish="length"), chunk(usage=u), "data: [DONE]"], "no token"),
        "finish stop": ([chunk("a"), chunk("b"), chunk(finish="stop"), chunk(usage=u), "data: [DONE]"],
                        "finish_reason"),
        "two finishes": ([chunk("a"), chunk("b", finish="length"), chunk(finish="length"),
                          chunk(usage=u), "data: [DONE]"], "finish_reason"),
        "token after finish": ([chunk("a"), chunk(finish="length"), chunk("b"), chunk(usage=u),
                                "data: [DONE]"], "after the finish_reason"),
        "no usage": ([chunk("a"), chunk("b"), chunk(finish="length"), "data: [DONE]"], "no usage"),
        "short usage": ([chunk("a"), chunk(finish="length"),
                         chunk(usage=dict(u, completion_tokens=1)), "data: [DONE]"], "asked for 2"),
        "usage not ints": ([chunk("a"), chunk(finish="length"),
                            chunk(usage=dict(u, completion_tokens="2")), "data: [DONE]"],
                           "malformed usage"),
        "two usages": (good[:6] + [chunk(usage=u)] + good[6:], "two usage"),
        "choice index 1": ([chunk("a", idx=1)] + good[1:], "not index 0"),
        "content not a string": (["data: " + json.dumps({"id": "c1", "object": "chat.completion.chunk",
                                  "choices": [{"index": 0, "delta": {"content": 7}}]})] + good,
                                 "not a string"),
        "no delta": (["data: " + json.dumps({"id": "c1", "object": "chat.completion.chunk",
                      "choices": [{"index": 0}]})] + good, "without a delta"),
        "too many tokens": ([chunk("x")] + good, "token chunks for"),
    }
    def text_chunk(text, finish=None, obj="text_completion"):
        return "data: " + json.dumps({"id": "c1", "object": obj, "choices": [
            {"index": 0, "text": text, "finish_reason": finish}]})

    good_text = [text_chunk("a"), text_chunk("b"), text_chunk("", finish="length"),
                 chunk(usage=u, obj="text_completion"), "data: [DONE]"]
    text_cases = {
        "completion: chat chunks": (good, "not text_completion"),
        "completion: no text": (["data: " + json.dumps({"id": "c1", "object": "text_completion",
                                 "choices": [{"index": 0, "finish_reason": None}]})] + good_text,
                                "without a text string"),
        "completion: wrong object": ([text_chunk("a", obj="chat.completion.chunk")] + good_text[1:],
                                     "not text_completion"),
    }
    failures = []
    for lines, chat in ((good, True), (good_text, False)):
        r = check_stream([(i * 0.1, l) for i, l in enumerate(lines)], 2, chat)
        if r["completion_tokens"] != 2 or r["prompt_tokens"] != 5 or len(r["token_times"]) != 2:
            failures.append(f"a well-formed stream read as {r}")
    cases = {k: (v[0], v[1], True) for k, v in cases.items()}
    cases.update({k: (v[0], v[1], False) for k, v in text_cases.items()})
    for name, (lines, why, chat) in cases.items():
        try:
            check_stream([(0.0, l) for l in lines], 2, chat)
            failures.append(f"{name}: accepted")
        except StreamError as e:
            if why not in str(e):
                failures.append(f"{name}: refused for another reason: {e}")
    # The decode rate: 2 clients x (2 + 3 gaps) / (2 + 1.5 s); a one-token reply adds nothing;
    # no gaps at all gives no rate.
    rate = decode_rate([{"token_times": [0, 1, 2]}, {"token_times": [5, 5.5, 6, 6.5]},
                        {"token_times": [9]}], 2)
    if rate is None or abs(rate - 2 * 5 / 3.5) > 1e-12:
        failures.append(f"decode_rate {rate}, expected {2 * 5 / 3.5}")
    if decode_rate([{"token_times": [1]}], 1) is not None:
        failures.append("decode_rate of one-token replies is not None")
    for f in failures:
        print("self-test FAILED:", f)
    print(f"self-test: two well-formed streams and {len(cases)} malformed ones, "
          f"{len(failures)} failure(s)")
    return 1 if failures else 0


# ---------------------------------------------------------------------------------- servers

class Server(ServerProcess):
    """A ServerProcess that streams chat or text completions."""

    def generate(self, prompt, max_tokens, timeout_s, chat=True):
        """One streamed chat completion (chat=False: text completion); returns check_stream's
        dict plus sent_s (when the request was sent), ttft_s and end_s."""
        req = {"max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True,
               "stream_options": {"include_usage": True}}
        if chat:
            req["messages"] = [{"role": "user", "content": prompt}]
        else:
            req["prompt"] = prompt
        body = json.dumps(req)
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout_s)
        try:
            t0 = time.perf_counter()
            c.request("POST", "/v1/chat/completions" if chat else "/v1/completions", body,
                      {"Content-Type": "application/json"})
            r = c.getresponse()
            if r.status != 200:
                raise StreamError(f"HTTP {r.status}: {r.read()[:300]!r}")
            ctype = r.getheader("Content-Type", "")
            if not ctype.startswith("text/event-stream"):
                raise StreamError(f"Content-Type {ctype!r}, not text/event-stream")
            lines = []
            for raw in r:
                lines.append((time.perf_counter(), raw.decode("utf-8", "strict").rstrip("\r\n")))
            end = time.perf_counter()
        except UnicodeDecodeError:
            raise StreamError("the body is not UTF-8") from None
        finally:
            c.close()
        try:
            out = check_stream(lines, max_tokens, chat)
        except StreamError as e:
            raise StreamError(f"{self.kind}: {e}") from None
        out.update(sent_s=t0, ttft_s=out["token_times"][0] - t0, end_s=end)
        return out


# ---------------------------------------------------------------------------------- the runs

def prompts_for(kind, clients, requests, rnd, words, seed):
    """The prompts of one cell: the same for every server, new for every cell and round."""
    rng = random.Random(f"{seed}/{kind}/{clients}/{rnd}")
    out = []
    for i in range(clients * requests):
        text = " ".join(rng.choice(WORDS) for _ in range(words))
        out.append(f"Request {rnd}.{clients}.{i} ({kind}). {text.capitalize()}.")
    return out


def run_cell(server, prompts, clients, max_tokens, timeout_s, chat):
    """C clients, each sending its share of `prompts` one after the other, all started together.
    Returns dict(wall_s, results) or raises the first client's error."""
    per = len(prompts) // clients
    results, errors = [], []
    lock = threading.Lock()
    barrier = threading.Barrier(clients + 1)

    def client(k):
        barrier.wait()
        for p in prompts[k * per:(k + 1) * per]:
            try:
                r = server.generate(p, max_tokens, timeout_s, chat)
            except (StreamError, OSError, http.client.HTTPException) as e:
                with lock:
                    errors.append(f"{server.kind}, client {k}: {type(e).__name__}: {e}")
                return
            with lock:
                results.append(r)

    threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(clients)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise RuntimeError("; ".join(errors[:3]) + ("" if server.alive() else f" ({server.kind} exited)"))
    return {"wall_s": wall, "results": results}


def decode_rate(results, clients):
    """Aggregate decode tok/s of a cell: clients / the mean inter-token gap, i.e. clients x the
    streamed tokens after each request's first over the time from its first token to its last
    (None without two tokens). The rate C streams decode at while all C are decoding, which
    tok/s (wall time, prefills and the clients' turnarounds included) understates."""
    gaps = sum(len(r["token_times"]) - 1 for r in results)
    span = sum(r["token_times"][-1] - r["token_times"][0] for r in results)
    return clients * gaps / span if gaps > 0 and span > 0 else None


def summarise(cells, clients):
    """One row from the rounds of one (server, prompt, clients) cell."""
    res = [r for c in cells for r in c["results"]]
    toks = [sum(r["completion_tokens"] for r in c["results"]) / c["wall_s"] for c in cells]
    dec = [x for x in (decode_rate(c["results"], clients) for c in cells) if x is not None]
    itl = [b - a for r in res for a, b in zip(r["token_times"], r["token_times"][1:])]
    ttft = [r["ttft_s"] for r in res]
    ms = lambda v: None if v is None else round(1000 * v, 2)
    return {
        "requests": len(res),
        "prompt_tokens": median([r["prompt_tokens"] for r in res]),
        "completion_tokens": sum(r["completion_tokens"] for r in res),
        "tok_s": round(median(toks), 2),
        "tok_s_rounds": [round(x, 2) for x in toks],
        "decode_tok_s": round(median(dec), 2) if dec else None,
        "decode_tok_s_rounds": [round(x, 2) for x in dec],
        "ttft_ms": {f"p{p}": ms(pct(ttft, p)) for p in (50, 90, 99)},
        "itl_ms": {f"p{p}": ms(pct(itl, p)) for p in (50, 90, 99)},
    }


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def git_commit():
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        return subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def fmt(v, nd=1):
    return "-" if v is None else f"{v:.{nd}f}"


def markdown(doc):
    out = []
    m = doc["meta"]
    out.append(f"commit {m['commit']}; {m['cpu']}; {m['threads']} threads; {m['endpoint']}; max_tokens "
               f"{m['max_tokens']}; {m['requests_per_client']} request(s) per client; rounds "
               f"{m['rounds']}; load average {m['load_before']} before, {m['load_after']} after")
    for s in doc["servers"]:
        out.append(f"{s['kind']}: `{s['cmd']}`")
    out.append("")
    llama = any(s["kind"] == "llama" for s in doc["servers"])
    hdr = ("| prompt | clients | server | tok/s | decode tok/s | decode x 1 client | "
           "TTFT p50 / p90 / p99 ms | ITL p50 / p90 / p99 ms |" +
           (" tok/s rewind / llama |" if llama else ""))
    out.append(hdr)
    out.append("|" + "---|" * (hdr.count("|") - 1))
    for row in doc["rows"]:
        ratio = ""
        if llama:
            if row["server"] == "rewind":
                other = next((r for r in doc["rows"] if r["server"] == "llama" and
                              r["prompt"] == row["prompt"] and r["clients"] == row["clients"]), None)
                ratio = f" {row['tok_s'] / other['tok_s']:.2f}x |" if other and other["tok_s"] else " - |"
            else:
                ratio = " |"
        t, i = row["ttft_ms"], row["itl_ms"]
        one = next((r for r in doc["rows"] if r["server"] == row["server"] and
                    r["prompt"] == row["prompt"] and r["clients"] == 1), None)
        dx = (f"{row['decode_tok_s'] / one['decode_tok_s']:.2f}x"
              if one and one.get("decode_tok_s") and row.get("decode_tok_s") else "-")
        out.append(f"| {row['prompt']} ({fmt(row['prompt_tokens'], 0)} tok) | {row['clients']} | "
                   f"{row['server']} | {fmt(row['tok_s'])} | {fmt(row.get('decode_tok_s'))} | {dx} | "
                   f"{fmt(t['p50'])} / {fmt(t['p90'])} / "
                   f"{fmt(t['p99'])} | {fmt(i['p50'], 2)} / {fmt(i['p90'], 2)} / {fmt(i['p99'], 2)} |"
                   f"{ratio}")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--self-test", action="store_true", help="check the stream checker and exit")
    ap.add_argument("--rewind", default="build/release/rewind", help="the rewind binary")
    ap.add_argument("--model", help="a GGUF file (or rewind model) both servers load; "
                    "omitted: rewind's built-in model")
    ap.add_argument("--llama-server", help="llama.cpp's llama-server binary (omit: rewind alone)")
    ap.add_argument("--clients", default="1,2,4,8,16", help="client counts, comma-separated")
    ap.add_argument("--prompts", default="short,long", help="prompt kinds: short, long or both")
    ap.add_argument("--short-words", type=int, default=16, help="words in a short prompt")
    ap.add_argument("--long-words", type=int, default=384, help="words in a long prompt")
    ap.add_argument("--max-tokens", type=int, default=64, help="tokens generated per request")
    ap.add_argument("--requests", type=int, default=2, help="requests per client per cell")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx-size", type=int, default=2048, help="context per sequence")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rewind-arg", action="append", default=[], help="extra `rewind serve` argument")
    ap.add_argument("--llama-arg", action="append", default=[], help="extra llama-server argument")
    ap.add_argument("--rewind-b", help="a second rewind binary, served beside the first "
                    "(server rewind-b; the cells alternate as with llama-server)")
    ap.add_argument("--rewind-b-arg", action="append", default=[],
                    help="extra argument of the second rewind server (alone: the same binary "
                    "with other options, e.g. --rewind-b-arg=--itl-target=off)")
    ap.add_argument("--startup-s", type=float, default=300)
    ap.add_argument("--timeout-s", type=float, default=900, help="per request")
    ap.add_argument("--endpoint", choices=("chat", "completions"), default="chat",
                    help="/v1/chat/completions or /v1/completions (the prompt as text)")
    ap.add_argument("--json", action="store_true", help="print one JSON object, not the table")
    args = ap.parse_args()
    if args.self_test:
        sys.exit(self_test())

    try:
        clients = [int(x) for x in args.clients.split(",")]
    except ValueError:
        ap.error("--clients: comma-separated positive integers")
    kinds = args.prompts.split(",")
    if not clients or min(clients) < 1 or not kinds or any(k not in ("short", "long") for k in kinds):
        ap.error("--clients must be positive integers, --prompts short and/or long")
    if min(args.short_words, args.long_words, args.max_tokens, args.requests, args.rounds,
           args.threads) < 1:
        ap.error("word counts, --max-tokens, --requests, --rounds and --threads must be >= 1")
    if args.llama_server and not args.model:
        ap.error("--llama-server needs --model (a GGUF file both servers load)")
    for flag, path in (("--rewind", args.rewind), ("--rewind-b", args.rewind_b)):
        if path is not None and not os.access(path, os.X_OK):
            ap.error(f"{flag} {path}: not an executable")
    slots = max(clients)
    chat = args.endpoint == "chat"

    rcmd = [args.rewind, "serve", "--host", "127.0.0.1", "--port", "0", "--threads",
            str(args.threads), "--parallel", str(slots), "--ctx-size", str(args.ctx_size)]
    if args.model:
        rcmd += ["--model", args.model]
    servers = [Server("rewind", rcmd + args.rewind_arg, 0)]
    if args.rewind_b or args.rewind_b_arg:
        bcmd = [args.rewind_b or args.rewind] + rcmd[1:] + args.rewind_arg + args.rewind_b_arg
        servers.append(Server("rewind-b", bcmd, 0))
    if args.llama_server:
        port = free_port()
        # llama-server splits -c among its -np slots: the same context per sequence as rewind.
        servers.append(Server("llama", [args.llama_server, "-m", args.model, "--host", "127.0.0.1",
                                        "--port", str(port), "-t", str(args.threads), "-tb",
                                        str(args.threads), "-np", str(slots), "-c",
                                        str(args.ctx_size * slots)] + args.llama_arg, port))

    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    commit = git_commit()  # the tree as the run starts
    cells = {}  # (prompt, clients, kind) -> [cell per round]
    started = []
    try:
        for s in servers:
            s.start(args.startup_s)
            started.append(s)
            s.generate("Warm up: say something.", min(8, args.max_tokens), args.timeout_s, chat)
        for kind in kinds:
            words = args.short_words if kind == "short" else args.long_words
            for c in clients:
                for rnd in range(args.rounds):
                    prompts = prompts_for(kind, c, args.requests, rnd, words, args.seed)
                    order = servers if rnd % 2 == 0 else servers[::-1]
                    for s in order:
                        cell = run_cell(s, prompts, c, args.max_tokens, args.timeout_s, chat)
                        cells.setdefault((kind, c, s.kind), []).append(cell)
                        n = sum(r["completion_tokens"] for r in cell["results"])
                        print(f"  {s.kind:6} {kind:5} clients {c:3} round {rnd}: {n} tokens in "
                              f"{cell['wall_s']:.2f} s = {n / cell['wall_s']:.1f} tok/s",
                              file=sys.stderr, flush=True)
    except (RuntimeError, StreamError, OSError, http.client.HTTPException) as e:
        print(f"serve_bench: error: {e}", file=sys.stderr)
        sys.exit(1)
    finally:
        for s in started:
            s.stop()

    rows = []
    for kind in kinds:
        for c in clients:
            for s in servers:
                rows.append(dict(prompt=kind, clients=c, server=s.kind,
                                 **summarise(cells[(kind, c, s.kind)], c)))
    doc = {
        "meta": {"commit": commit, "cpu": cpu_name(), "threads": args.threads,
                 "endpoint": "/v1/chat/completions" if chat else "/v1/completions",
                 "max_tokens": args.max_tokens, "requests_per_client": args.requests,
                 "rounds": args.rounds, "short_words": args.short_words,
                 "long_words": args.long_words, "ctx_size": args.ctx_size,
                 "load_before": load_before,
                 "load_after": " ".join(f"{x:.2f}" for x in os.getloadavg())},
        "servers": [{"kind": s.kind, "cmd": " ".join(s.cmd)} for s in servers],
        "rows": rows,
    }
    print(json.dumps(doc, indent=1) if args.json else markdown(doc))


if __name__ == "__main__":
    main()
