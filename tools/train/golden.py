"""Golden data for tests/integration/trained_model_test.cpp, from the exported checkpoints:

- <model>_golden.json: token sequences (held-out text, a KJV-style prompt, a rendered tool-call
  prompt), the fp64 PyTorch logits (per-token GDN recurrence) at a few positions and the argmax
  at every position, for models/kjv-target and models/kjv-draft; for the target also the MTP
  head's logits (position i: h_i and t_{i+1}, predicting t_{i+2}).
- tokenizer_golden.json: held-out texts and the ids this script's encoder gives.
- chat_golden.json: conversations (with tools and tool calls) and their rendering by the chat
  template through jinja2 the way Hugging Face renders it.
- kjv_words.txt: every word of the corpus (for the "greedy text is English" check).
"""
import json
import os
import re

import torch

import kjv_data as kd
import train as T

OUT_REL = os.path.join("tests", "data", "kjv")


def fmt(v):
    return float("%.9g" % v)


def margin(lg):
    """Top-1 minus top-2 logit per row (argmax checks skip near-ties)."""
    t = lg.topk(2, -1).values
    return [fmt(v) for v in (t[:, 0] - t[:, 1]).tolist()]


def tool_prompt(renderer, ref="John 3:16"):
    msgs = [{"role": "user", "content": "Look up %s." % ref}]
    return renderer.render(msgs, tools=[kd.LOOKUP_TOOL], add_generation_prompt=True)


def sequences(tok, held, renderer):
    b, c, vs = held[0]
    heldout = tok.encode("\n".join(t for _, t in vs))[:96]
    kjv = tok.encode("In the beginning God created the heaven and the earth. And the LORD said unto Moses,")
    tool = tok.encode(tool_prompt(renderer))
    return {"heldout": heldout, "kjv_prompt": kjv, "tool_prompt": tool}


@torch.no_grad()
def model_golden(preset, model_dir, seqs):
    m = T.load_exported(preset, model_dir, torch.float64)
    out = {"model": "models/kjv-" + preset, "sequences": []}
    for name, ids in seqs.items():
        x = torch.tensor([ids])
        h = m.hidden(x, chunked=False)
        lg = m.logits(h)[0]
        n = len(ids)
        pos = sorted({0, n // 3, (2 * n) // 3, n - 1})
        rec = {"name": name, "tokens": ids, "positions": pos,
               "logits": {str(p): [fmt(v) for v in lg[p].tolist()] for p in pos},
               "argmax": lg.argmax(-1).tolist(), "argmax_margin": margin(lg)}
        if m.mtp is not None:
            mh = m.mtp_hidden(h, x)
            ml = m.logits(mh)[0]                     # row i: from h_i and t_{i+1}, predicts t_{i+2}
            mpos = sorted({0, (n - 1) // 2, n - 2})
            rec["mtp_positions"] = mpos
            rec["mtp_logits"] = {str(p): [fmt(v) for v in ml[p].tolist()] for p in mpos}
            rec["mtp_argmax"] = ml.argmax(-1).tolist()
            rec["mtp_argmax_margin"] = margin(ml)
        out["sequences"].append(rec)
    return out


def chat_cases():
    call = kd.lookup_call("Genesis", 1, 3)
    return [
        {"messages": [{"role": "user", "content": "Look up John 3:16."}],
         "tools": [kd.LOOKUP_TOOL], "add_generation_prompt": True},
        {"messages": [{"role": "system", "content": "You are a helpful assistant."},
                      {"role": "user", "content": "Please look up Genesis 1:3."},
                      {"role": "assistant", "content": "", "tool_calls": [call]},
                      {"role": "tool", "content": "And God said, Let there be light: and there was light."},
                      {"role": "assistant", "content": "Genesis 1:3 says: And God said, Let there be light: and there was light."}],
         "tools": [kd.LOOKUP_TOOL], "add_generation_prompt": False},
        {"messages": [{"role": "system", "content": "Answer with the words of the King James Bible."},
                      {"role": "user", "content": "Continue: In the beginning"}],
         "tools": None, "add_generation_prompt": True},
    ]


def main(args, root, tok_dir):
    torch.set_num_threads(args.threads)
    out_dir = os.path.join(root, OUT_REL)
    os.makedirs(out_dir, exist_ok=True)
    chapters = kd.load_kjv()
    train_ch, held = kd.split_chapters(chapters)
    tok = kd.Tokenizer(os.path.join(tok_dir, "tokenizer.json"))
    renderer = kd.ChatRenderer(kd.read_rewind_template(root))

    # Tokenizer: three held-out chapters, plus text with specials, digits, spacing, contractions.
    texts = ["\n".join(t for _, t in vs) for _, _, vs in held[:3]]
    texts.append("<|im_start|>user\nRecite Psalms 23:1.<|im_end|>\n<|im_start|>assistant\n"
                 "The LORD is my shepherd; I shall not want.  \n\n  They'll say it's 1611!<|im_end|>")
    json.dump({"cases": [{"text": t, "ids": tok.encode(t)} for t in texts]},
              open(os.path.join(out_dir, "tokenizer_golden.json"), "w"), indent=None)

    cases = chat_cases()
    for c in cases:
        c["rendered"] = renderer.render(c["messages"], tools=c["tools"],
                                        add_generation_prompt=c["add_generation_prompt"])
    json.dump({"cases": cases}, open(os.path.join(out_dir, "chat_golden.json"), "w"), indent=1)

    words = set()
    for _, _, vs in chapters:
        for _, t in vs:
            words.update(re.findall(r"[A-Za-z]+", t))
    open(os.path.join(out_dir, "kjv_words.txt"), "w").write("\n".join(sorted(words)) + "\n")

    seqs = sequences(tok, held, renderer)
    for preset in [p for p in args.presets.split(",") if p]:
        g = model_golden(preset, os.path.join(root, "models", "kjv-" + preset), seqs)
        json.dump(g, open(os.path.join(out_dir, preset + "_golden.json"), "w"), separators=(",", ":"))
        print("wrote %s golden (%d sequences)" % (preset, len(seqs)))
