#!/usr/bin/env python3
"""scripts/cluster.sh end to end: two replicas, Redis and HAProxy. The turns of one conversation
go to one replica; with that replica killed, the conversation's edited turn goes to the other,
which resumes from the shared tier (cached tokens > 0) and answers exactly as a cold server does
(greedy text and the log-probabilities of every token). Exit 77 (skipped) without redis-server,
redis-cli or haproxy, except where the CI variable is set: then a failure."""
import json, os, re, shutil, signal, subprocess, sys, time, urllib.request

binary, script = sys.argv[1], sys.argv[2]
missing = [t for t in ("redis-server", "redis-cli", "haproxy") if not shutil.which(t)]
if missing:
    ci = os.environ.get("CI", "")
    print(f"cluster_script_test: {', '.join(missing)} not installed (scripts/setup.sh)")
    sys.exit(1 if ci not in ("", "0", "false") else 77)


def post(url, body):
    req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.headers.get("X-Rewind-Replica"), json.loads(r.read())


def chat(third):
    msgs = [{"role": "system", "content": "You answer questions about old lighthouses."},
            {"role": "user", "content": "Tell me about the oldest lighthouse you know."},
            {"role": "assistant", "content": "It stands on a rocky point near the harbour."},
            {"role": "user", "content": "How did the keepers live there in winter?"},
            {"role": "assistant", "content": "They stored food in autumn and kept the lamp lit."},
            {"role": "user", "content": third}]
    return {"model": "tiny", "max_tokens": 8, "temperature": 0, "messages": msgs,
            "logprobs": True, "top_logprobs": 5}


state = None
proc = subprocess.Popen([script, "2", "--port", "0", "--binary", binary, "--",
                         "--threads", "1", "--checkpoint-interval", "16"],
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
cold = None
try:
    url = None
    deadline = time.time() + 120
    while url is None and time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        m = re.search(r"state in (\S+)", line)
        if m:
            state = m.group(1)
        m = re.search(r"listening on (http://\S+)", line)
        if m:
            url = m.group(1)
    assert url, "cluster.sh did not start"
    first, a = post(url, chat("What did they do when the lamp failed on a stormy night?"))
    again, _ = post(url, chat("What did they do when the lamp failed on a stormy night?"))
    assert first and first == again, (first, again)
    # The replica that served it goes down; its conversation moves on.
    time.sleep(0.5)  # its publisher sends the conversation's objects
    pid = int(open(f"{state}/replica{first[1:]}.pid").read())
    os.kill(pid, signal.SIGKILL)
    edited = chat("What did they do when the lamp failed on a calm night in the harbour?")
    other = None
    for _ in range(100):
        try:
            other, b = post(url, edited)
            break
        except Exception:
            time.sleep(0.1)
    assert other and other != first, (first, other)
    cached = b["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached > 0, f"the other replica resumed from the shared tier: {b['usage']}"
    # A cold server's answer to the edited turn.
    cold = subprocess.Popen([binary, "serve", "--model", f"{state}/tiny", "--port", "0",
                             "--threads", "1", "--no-cache"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    cold_url = None
    while cold_url is None:
        line = cold.stdout.readline()
        assert line, "the cold server did not start"
        m = re.search(r"listening on (http://\S+)", line)
        cold_url = m.group(1) if m else None
    _, c = post(cold_url, edited)
    assert b["choices"] == c["choices"], "the failover answer equals a cold server's"
    print(f"cluster_script_test: ok (served by {first}, then {other} resumed {cached} tokens)")
finally:
    if cold:
        cold.kill()
        cold.wait()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    if state:
        shutil.rmtree(state, ignore_errors=True)
