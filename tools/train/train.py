#!/usr/bin/python3
"""Trains rewind's built-in models on the King James Bible (Debian bible-kjv-text).

  /usr/bin/python3 tools/train/train.py tokenizer              # BPE tokenizer -> build/train/tok
  /usr/bin/python3 tools/train/train.py train --preset target  # -> models/kjv-target
  /usr/bin/python3 tools/train/train.py train --preset draft   # -> models/kjv-draft
  /usr/bin/python3 tools/train/train.py golden                 # golden logits for the C++ test

Needs Debian's python3-torch, python3-numpy, python3-matplotlib, python3-regex, python3-jinja2,
python3-tqdm and bible-kjv (the `bible` program) + bible-kjv-text. Run from anywhere; paths are
relative to the repository root. Everything is seeded. See models/README.md.
"""
import argparse
import json
import math
import os
import random
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kjv_data as kd  # noqa: E402
import qwen35_model as qm  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
TOK_DIR = os.path.join(ROOT, "build", "train", "tok")
N_MERGES = 4096 - 256 - len(kd.SPECIAL_TOKENS)  # 4096 ids in all

PRESETS = {
    # 8 layers = 6 GDN + 2 full attention (lin, lin, lin, full) x 2, MTP head
    "target": dict(hidden=160, layers=8, nh=4, nkv=2, D=40, Hk=4, Hv=4, dk=40, dv=40, inter=448,
                   mtp=1, lr=2e-3, seed=1),
    # 4 layers = 3 GDN + 1 full attention, no MTP
    "draft": dict(hidden=96, layers=4, nh=2, nkv=1, D=48, Hk=2, Hv=2, dk=48, dv=48, inter=256,
                  mtp=0, lr=3e-3, seed=2),
}
MIX = (0.65, 0.20, 0.15)  # plain KJV documents, chat samples, tool-call samples (per document)


def tokenizer_files(out_dir, tok_json):
    os.makedirs(out_dir, exist_ok=True)
    open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8").write(tok_json)
    tcfg = {"tokenizer_class": "Qwen2Tokenizer", "bos_token": None, "eos_token": "<|im_end|>",
            "pad_token": "<|endoftext|>", "model_max_length": 262144,
            "chat_template": kd.read_rewind_template(ROOT), "add_prefix_space": False}
    open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8").write(
        json.dumps(tcfg, indent=2, ensure_ascii=False) + "\n")


def corpus():
    chapters = kd.load_kjv()
    return kd.split_chapters(chapters)


def sample_document(train_ch, rng, renderer):
    r = rng.random()
    if r < MIX[0]:
        return kd.plain_document(train_ch, rng), "plain"
    if r < MIX[0] + MIX[1]:
        return renderer.render(kd.make_chat_sample(train_ch, rng)), "chat"
    msgs, tools = kd.make_tool_sample(train_ch, rng)
    return renderer.render(msgs, tools=tools), "tool"


def cmd_tokenizer(args):
    train_ch, _ = corpus()
    rng = random.Random(7)
    renderer = kd.ChatRenderer(kd.read_rewind_template(ROOT))
    # The tokenizer sees all training chapters once plus a sample of the chat/tool mix.
    texts = ["\n".join(t for _, t in vs) for _, _, vs in train_ch]
    for _ in range(3000):
        d, kind = sample_document(train_ch, rng, renderer)
        if kind != "plain":
            texts.append(d)
    t0 = time.time()
    tok_bytes, merges = kd.train_bpe(texts, N_MERGES)
    tokenizer_files(TOK_DIR, kd.tokenizer_json(tok_bytes, merges))
    tok = kd.Tokenizer(os.path.join(TOK_DIR, "tokenizer.json"))
    n_chars = sum(len(t) for t in texts[:len(train_ch)])
    n_tok = sum(len(tok.encode(t)) for t in texts[:len(train_ch)])
    print("tokenizer: %d ids (%d merges) in %.1fs; training chapters: %d chars -> %d tokens "
          "(%.2f chars/token)" % (tok.vocab_size, len(merges), time.time() - t0, n_chars, n_tok,
                                   n_chars / n_tok))
    for kind in ("plain", "chat", "tool"):
        lens = []
        while len(lens) < 200:
            d, k = sample_document(train_ch, rng, renderer)
            if k == kind:
                lens.append(len(tok.encode(d)))
        print("  %s documents: mean %.0f tokens, max %d" % (kind, sum(lens) / len(lens), max(lens)))


class Batcher:
    """Rows of T+1 tokens, each starting at a document start; documents end with
    <|endoftext|>; the last document of a row is cut."""

    def __init__(self, train_ch, tok, seed, T):
        self.ch, self.tok, self.T = train_ch, tok, T
        self.rng = random.Random(seed)
        self.renderer = kd.ChatRenderer(kd.read_rewind_template(ROOT))
        self.eot = tok.special["<|endoftext|>"]

    def row(self):
        ids = []
        while len(ids) < self.T + 1:
            d, _ = sample_document(self.ch, self.rng, self.renderer)
            ids += self.tok.encode(d) + [self.eot]
        return ids[:self.T + 1]

    def batch(self, B):
        return torch.tensor([self.row() for _ in range(B)], dtype=torch.long)


def heldout_sequences(held, tok):
    eot = tok.special["<|endoftext|>"]
    return [tok.encode("\n".join(t for _, t in vs)) + [eot] for _, _, vs in held]


@torch.no_grad()
def evaluate(model, seqs, max_len=1024):
    """Held-out NLL per token (zero state at each chapter start; chapters longer than max_len
    are cut into independent windows) and the MTP's top-1 accuracy for t_{i+2}."""
    model.eval()
    nll, n, mtp_ok, mtp_n = 0.0, 0, 0, 0
    for s in seqs:
        for a in range(0, len(s) - 1, max_len):
            w = torch.tensor([s[a:a + max_len + 1]], dtype=torch.long)
            if w.shape[1] < 2:
                continue
            x, y = w[:, :-1], w[:, 1:]
            h = model.hidden(x)
            lg = model.logits(h)
            nll += F.cross_entropy(lg[0].double(), y[0], reduction="sum").item()
            n += y.shape[1]
            if model.mtp is not None and x.shape[1] >= 2:
                mh = model.mtp_hidden(h, x)
                pred = model.logits(mh).argmax(-1)[0]          # predicts x[i+2] = y[i+1]
                mtp_ok += (pred == y[0, 1:]).sum().item()
                mtp_n += y.shape[1] - 1
    model.train()
    return nll / n, (mtp_ok / mtp_n if mtp_n else None), n


def lr_at(step, progress, peak, warm=30):
    """Linear warm-up over `warm` steps, then cosine from peak to peak/10 over progress 0..1."""
    if step < warm:
        return peak * (step + 1) / warm
    p = min(1.0, progress)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))


def make_model(preset, vocab):
    p = PRESETS[preset]
    c = qm.Cfg(vocab_size=vocab, **{k: v for k, v in p.items() if k not in ("lr", "seed")})
    return qm.Model(c)


def export(model, out_dir, tok):
    os.makedirs(out_dir, exist_ok=True)
    st = qm.hf_state(model)
    f32 = {n for n in st if n.endswith("A_log")}
    qm.save_safetensors(os.path.join(out_dir, "model.safetensors"), st, f32_names=f32)
    eos, eot = tok.special["<|im_end|>"], tok.special["<|endoftext|>"]
    json.dump(qm.hf_config(model.c, eos, eot), open(os.path.join(out_dir, "config.json"), "w"),
              indent=2)
    tokenizer_files(out_dir, open(os.path.join(TOK_DIR, "tokenizer.json"), encoding="utf-8").read())
    json.dump({"eos_token_id": [eos, eot], "do_sample": False},
              open(os.path.join(out_dir, "generation_config.json"), "w"), indent=2)


def load_exported(preset, out_dir, dtype=torch.float32):
    tensors = qm.load_safetensors(os.path.join(out_dir, "model.safetensors"))
    cfg = json.load(open(os.path.join(out_dir, "config.json")))["text_config"]
    m = make_model(preset, cfg["vocab_size"])
    qm.load_into(m, tensors)
    return m.to(dtype)


def plot(log, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    steps = [r["step"] for r in log["train"]]
    def ema(v, a=0.9):
        out, e = [], None
        for x in v:
            e = x if e is None else a * e + (1 - a) * x
            out.append(e)
        return out

    fig, ax = plt.subplots(figsize=(7, 4))
    tl = [r["loss"] for r in log["train"]]
    ax.plot(steps, tl, lw=0.5, alpha=0.35, color="C0")
    ax.plot(steps, ema(tl), lw=1.2, color="C0", label="train loss, next token (EMA 0.9)")
    if any("mtp_loss" in r for r in log["train"]):
        ml = [r["mtp_loss"] for r in log["train"]]
        ax.plot(steps, ml, lw=0.5, alpha=0.35, color="C2")
        ax.plot(steps, ema(ml), lw=1.2, color="C2", label="train loss, MTP token i+2 (EMA 0.9)")
    ev = log["eval"]
    ax.plot([r["step"] for r in ev], [r["heldout_loss"] for r in ev], "o-", color="C1",
            label="held-out loss (6 chapters)")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def cmd_train(args):
    from tqdm import tqdm
    torch.set_num_threads(args.threads)
    p = PRESETS[args.preset]
    torch.manual_seed(p["seed"])
    train_ch, held = corpus()
    tok = kd.Tokenizer(os.path.join(TOK_DIR, "tokenizer.json"))
    model = make_model(args.preset, tok.vocab_size)
    n_params = sum(x.numel() for x in model.parameters())
    n_mtp = sum(x.numel() for x in model.mtp.parameters()) if model.mtp is not None else 0
    print("%s: %d parameters (%d in the MTP head)" % (args.preset, n_params, n_mtp))
    decay = [x for n, x in model.named_parameters() if x.dim() == 2]
    no_decay = [x for n, x in model.named_parameters() if x.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=p["lr"], betas=(0.9, 0.95))
    batcher = Batcher(train_ch, tok, p["seed"] + 100, args.seq)
    held_seqs = heldout_sequences(held, tok)
    eval_seqs = held_seqs[:args.eval_chapters]
    log = {"preset": args.preset, "params": n_params, "mtp_params": n_mtp, "train": [], "eval": [],
           "steps": args.steps, "batch": args.batch, "seq": args.seq, "threads": args.threads}
    t0 = time.time()
    # --cpu-budget S: the schedule follows the CPU time this process has used (progress =
    # cpu / S, so a machine shared with other work trains the same amount, only slower), capped
    # by --wall-cap seconds of wall time; training stops at progress 1. Otherwise progress =
    # step / --steps.
    budget = args.cpu_budget
    c0 = time.process_time()

    def progress_now():
        if not budget:
            return step / args.steps
        p = (time.process_time() - c0) / budget
        if args.wall_cap:
            p = max(p, (time.time() - t0) / args.wall_cap)
        return p

    bar = tqdm(total=1000 if budget else args.steps, desc=args.preset, dynamic_ncols=True,
               mininterval=5, unit="" if budget else "step")
    ema = None
    step = 0
    while True:
        progress = progress_now()
        if progress >= 1.0:
            break
        lr = lr_at(step, progress, p["lr"])
        for g in opt.param_groups:
            g["lr"] = lr
        w = batcher.batch(args.batch)
        x, y = w[:, :-1], w[:, 1:]
        h = model.hidden(x)
        loss = F.cross_entropy(model.logits(h).reshape(-1, tok.vocab_size), y.reshape(-1))
        total = loss
        rec = {"step": step, "loss": loss.item(), "lr": lr}
        if model.mtp is not None:
            mh = model.mtp_hidden(h, x)
            mloss = F.cross_entropy(model.logits(mh).reshape(-1, tok.vocab_size),
                                    y[:, 1:].reshape(-1))
            total = total + args.mtp_weight * mloss
            rec["mtp_loss"] = mloss.item()
        opt.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        rec["time"] = time.time() - t0
        rec["cpu"] = time.process_time() - c0
        log["train"].append(rec)
        ema = rec["loss"] if ema is None else 0.95 * ema + 0.05 * rec["loss"]
        bar.set_postfix(step=step + 1, loss="%.3f" % ema, lr="%.1e" % lr)
        step += 1
        last = progress_now() >= 1.0
        bar.update(min(1000, int(1000 * progress_now())) - bar.n if budget else 1)
        if step % args.eval_every == 0 or last:
            l, acc, _ = evaluate(model, eval_seqs)
            log["eval"].append({"step": step, "heldout_loss": l, "mtp_top1": acc,
                                "time": time.time() - t0, "cpu": time.process_time() - c0})
            tqdm.write("step %d: held-out loss %.3f (ppl %.1f)%s" % (
                step, l, math.exp(l), "" if acc is None else ", MTP top-1 %.3f" % acc))
    bar.close()
    train_s = time.time() - t0
    log["steps"] = step
    log["cpu_seconds"] = time.process_time() - c0
    log["cpu_budget"] = budget
    log["wall_cap"] = args.wall_cap
    out_dir = os.path.join(ROOT, "models", "kjv-" + args.preset)
    export(model, out_dir, tok)
    # Final figures on the exported (BF16-rounded) weights, all held-out chapters.
    m2 = load_exported(args.preset, out_dir)
    l, acc, n_tok = evaluate(m2, held_seqs)
    log.update({"train_seconds": train_s, "heldout_loss": l, "heldout_ppl": math.exp(l),
                "heldout_tokens": n_tok, "heldout_chapters": len(held),
                "heldout_chapter_names": ["%s %d" % (b, c) for b, c, _ in held],
                "mtp_heldout_top1": acc, "final_train_loss_ema": ema,
                "command": "/usr/bin/python3 tools/train/train.py train --preset %s %s "
                           "--batch %d --seq %d --threads %d" % (
                               args.preset, ("--cpu-budget %g --wall-cap %g" % (budget, args.wall_cap)) if budget else
                               ("--steps %d" % args.steps), args.batch, args.seq, args.threads)})
    json.dump(log, open(os.path.join(out_dir, "train_log.json"), "w"), indent=1)
    plot(log, os.path.join(out_dir, "loss.png"), "kjv-%s (%d params)" % (args.preset, n_params))
    print("trained %d steps in %.0fs; held-out loss %.4f, ppl %.2f over %d tokens%s" % (
        step, train_s, l, math.exp(l), n_tok,
        "" if acc is None else "; MTP held-out top-1 %.4f" % acc))


def cmd_bench(args):
    """Times a few training steps (to size --steps)."""
    torch.set_num_threads(args.threads)
    tok = kd.Tokenizer(os.path.join(TOK_DIR, "tokenizer.json"))
    train_ch, _ = corpus()
    model = make_model(args.preset, tok.vocab_size)
    print("params", sum(x.numel() for x in model.parameters()))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batcher = Batcher(train_ch, tok, 0, args.seq)
    for i in range(args.steps):
        t0 = time.time()
        w = batcher.batch(args.batch)
        t1 = time.time()
        x, y = w[:, :-1], w[:, 1:]
        h = model.hidden(x)
        loss = F.cross_entropy(model.logits(h).reshape(-1, tok.vocab_size), y.reshape(-1))
        if model.mtp is not None:
            loss = loss + 0.3 * F.cross_entropy(model.logits(model.mtp_hidden(h, x)).reshape(
                -1, tok.vocab_size), y[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        print("step %d: data %.2fs, step %.2fs, loss %.3f" % (i, t1 - t0, time.time() - t1, loss.item()))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("tokenizer")
    for name in ("train", "bench"):
        t = sub.add_parser(name)
        t.add_argument("--preset", choices=sorted(PRESETS), required=True)
        t.add_argument("--steps", type=int, default=1000)
        t.add_argument("--batch", type=int, default=8)
        t.add_argument("--seq", type=int, default=512)
        t.add_argument("--threads", type=int, default=2)
        t.add_argument("--mtp-weight", type=float, default=0.3)
        t.add_argument("--cpu-budget", type=float, default=0.0,
                       help="train for this many CPU seconds of this process (schedule by it)")
        t.add_argument("--wall-cap", type=float, default=0.0,
                       help="with --cpu-budget: stop after this many wall seconds at the latest")
        t.add_argument("--eval-every", type=int, default=50)
        t.add_argument("--eval-chapters", type=int, default=6)
    pl = sub.add_parser("plot")
    pl.add_argument("--preset", choices=sorted(PRESETS), required=True)
    g = sub.add_parser("golden")
    g.add_argument("--threads", type=int, default=2)
    g.add_argument("--presets", default="target,draft")
    a = ap.parse_args()
    if a.cmd == "tokenizer":
        cmd_tokenizer(a)
    elif a.cmd == "train":
        cmd_train(a)
    elif a.cmd == "bench":
        cmd_bench(a)
    elif a.cmd == "plot":  # redraws loss.png from train_log.json
        d = os.path.join(ROOT, "models", "kjv-" + a.preset)
        log = json.load(open(os.path.join(d, "train_log.json")))
        plot(log, os.path.join(d, "loss.png"), "kjv-%s (%d params)" % (a.preset, log["params"]))
    else:
        import golden
        golden.main(a, ROOT, TOK_DIR)


if __name__ == "__main__":
    main()
