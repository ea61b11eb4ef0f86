#!/usr/bin/python3
"""Greedy tool-call check of a trained model through rewind itself: renders N lookup requests
(references drawn, seeded, from the held-out chapters) with the lookup_verse tool and the
generation prompt, runs `rewind run` greedy on each, and counts replies that hold a parseable
<tool_call> for lookup_verse and those whose arguments equal the request.

  /usr/bin/python3 tools/train/eval_tools.py [--model models/kjv-target] [-n 40]
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kjv_data as kd  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
CALL = re.compile(r"<tool_call>\n<function=lookup_verse>\n<parameter=book>\n(.*?)\n</parameter>\n"
                  r"<parameter=chapter>\n(\d+)\n</parameter>\n<parameter=verse>\n(\d+)\n"
                  r"</parameter>\n</function>\n</tool_call>")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "kjv-target"))
    ap.add_argument("--rewind", default=os.path.join(ROOT, "build", "release", "rewind"))
    ap.add_argument("-n", type=int, default=40)
    ap.add_argument("--seed", type=int, default=99)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    _, held = kd.split_chapters(kd.load_kjv())
    renderer = kd.ChatRenderer(kd.read_rewind_template(ROOT))
    rng = random.Random(a.seed)
    ok = exact = 0
    samples = []
    for i in range(a.n):
        book, ch, verses = rng.choice(held)
        vn, _ = rng.choice(verses)
        ref = kd.ref_str(book, ch, vn)
        msgs = []
        if i % 2:
            msgs.append({"role": "system", "content": rng.choice(kd.SYSTEM_PROMPTS)})
        msgs.append({"role": "user", "content": rng.choice(kd.LOOKUP_PHRASES).format(ref=ref)})
        prompt = renderer.render(msgs, tools=[kd.LOOKUP_TOOL], add_generation_prompt=True)
        r = subprocess.run([a.rewind, "run", "--model", a.model, "--prompt", prompt, "-n", "96",
                            "--json", "-t", str(a.threads)], capture_output=True, text=True,
                           check=True)
        text = json.loads(r.stdout)["text"]
        m = CALL.search(text)
        good = m is not None
        right = good and (m.group(1), int(m.group(2)), int(m.group(3))) == (book, ch, vn)
        ok += good
        exact += right
        if len(samples) < 3:
            samples.append({"request": msgs[-1]["content"], "reply": text})
    print(json.dumps({"n": a.n, "parseable_lookup_calls": ok, "exact_arguments": exact,
                      "samples": samples}, indent=1))


if __name__ == "__main__":
    main()
