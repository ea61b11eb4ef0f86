"""KJV corpus, train/held-out split, chat and tool-call samples, byte-level BPE tokenizer.

The text comes from Debian's bible-kjv-text package, dumped with the package's own `bible`
program (bible-kjv). Nothing is downloaded.

Tokenizer: byte-level BPE in the layout rewind writes itself (src/rewind/tokenizer/
bpe_trainer.cpp): ids 0..255 are the single bytes in byte order, merged tokens follow, the
special tokens come last as added_tokens; NFC normaliser; Qwen3.5 pre-tokenizer regex with
Split(Isolated) then ByteLevel(use_regex=false); ByteLevel decoder; merges in rank order.
"""
import json
import random
import re
import subprocess
import unicodedata
from collections import defaultdict

import regex  # python3-regex (Debian): supports \p{L}, \p{M}, \p{N}

QWEN35_PRETOKENIZER_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# The special tokens of rewind's own checkpoints (apps/make_model.cpp), in the same order.
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>",
                  "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]

# ---------------------------------------------------------------------------------------------
# Corpus


def load_kjv():
    """Returns a list of (book, chapter, [(verse_number, text), ...]) in canonical order."""
    out = subprocess.run(["bible", "-l100000", "Gen1:1-Rev22:21"], check=True,
                         capture_output=True, text=True).stdout
    chapters = []
    head = re.compile(r"^(.+) (\d+)$")
    verse = re.compile(r"^\s+(\d+) (.*)$")
    for line in out.split("\n"):
        if not line.strip():
            continue
        m = verse.match(line)
        if m:
            text = " ".join(m.group(2).split())
            chapters[-1][2].append((int(m.group(1)), text))
            continue
        m = head.match(line)
        if not m:
            raise ValueError("unexpected line in the bible dump: %r" % line)
        chapters.append((m.group(1), int(m.group(2)), []))
    n_verses = sum(len(c[2]) for c in chapters)
    if len(chapters) != 1189 or n_verses != 31102:
        raise ValueError("expected 1189 chapters / 31102 verses, got %d / %d" % (len(chapters), n_verses))
    return chapters


def split_chapters(chapters, frac=0.02, seed=1234):
    """A fixed seeded choice of ~frac of the chapters is held out."""
    rng = random.Random(seed)
    idx = list(range(len(chapters)))
    rng.shuffle(idx)
    n_val = max(1, round(frac * len(chapters)))
    val = set(idx[:n_val])
    train = [c for i, c in enumerate(chapters) if i not in val]
    held = [c for i, c in enumerate(chapters) if i in val]
    return train, held


# ---------------------------------------------------------------------------------------------
# Chat template (rewind's own, read from the C++ source so that it is exactly the same text)

def read_rewind_template(repo_root):
    src = open(repo_root + "/src/rewind/chat/chatml_template.cpp", encoding="utf-8").read()
    a = src.index('R"JINJA(') + len('R"JINJA(')
    b = src.index(')JINJA"', a)
    return src[a:b]


class ChatRenderer:
    """Renders messages with the template the way Hugging Face transformers does (jinja2
    sandbox with trim_blocks/lstrip_blocks, tojson = json.dumps(ensure_ascii=False))."""

    def __init__(self, template_text):
        from jinja2.sandbox import ImmutableSandboxedEnvironment
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)

        def raise_exception(msg):
            raise ValueError(msg)

        def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
            return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                              sort_keys=sort_keys)
        env.filters["tojson"] = tojson
        if "items" not in env.filters:
            env.filters["items"] = lambda d: list(d.items())
        env.globals["raise_exception"] = raise_exception
        self.tmpl = env.from_string(template_text)

    def render(self, messages, tools=None, add_generation_prompt=False):
        kw = dict(messages=messages, add_generation_prompt=add_generation_prompt,
                  bos_token="", eos_token="<|im_end|>")
        if tools:
            kw["tools"] = tools
        return self.tmpl.render(**kw)


LOOKUP_TOOL = {
    "type": "function",
    "function": {
        "name": "lookup_verse",
        "description": "Look up one verse of the King James Bible by its reference.",
        "parameters": {
            "type": "object",
            "properties": {
                "book": {"type": "string", "description": "Book name, e.g. Genesis"},
                "chapter": {"type": "integer", "description": "Chapter number"},
                "verse": {"type": "integer", "description": "Verse number"},
            },
            "required": ["book", "chapter", "verse"],
        },
    },
}

SYSTEM_PROMPTS = [
    "You are a helpful assistant.",
    "You are a helpful assistant that knows the King James Bible.",
    "Answer with the words of the King James Bible.",
]

LOOKUP_PHRASES = [
    "Look up {ref}.",
    "Look up {ref} for me.",
    "Please look up {ref}.",
    "Can you look up {ref}?",
    "Find the verse {ref}.",
    "What does {ref} say?",
    "Use the tool to look up {ref}.",
    "I need the text of {ref}.",
]


def ref_str(book, ch, v):
    return "%s %d:%d" % (book, ch, v)


def first_words(text, rng):
    words = text.split(" ")
    if len(words) < 4:
        return None, None
    k = rng.randint(2, min(8, len(words) - 2))
    return " ".join(words[:k]), " ".join(words[k:])


def make_chat_sample(chapters, rng):
    """A ChatML conversation built from the corpus (messages list, no tools)."""
    book, ch, verses = rng.choice(chapters)
    i = rng.randrange(len(verses))
    vn, text = verses[i]
    msgs = []
    if rng.random() < 0.7:
        msgs.append({"role": "system", "content": rng.choice(SYSTEM_PROMPTS)})
    kind = rng.random()
    if kind < 0.35:
        msgs += [{"role": "user", "content": "Recite %s." % ref_str(book, ch, vn)},
                 {"role": "assistant", "content": text}]
    elif kind < 0.75:
        start, rest = first_words(text, rng)
        if start is None:
            msgs += [{"role": "user", "content": "Recite %s." % ref_str(book, ch, vn)},
                     {"role": "assistant", "content": text}]
        else:
            msgs += [{"role": "user", "content": "Continue: " + start},
                     {"role": "assistant", "content": rest}]
    else:
        if i + 1 >= len(verses):
            i -= 1
        vn, text = verses[i]
        nxt = verses[i + 1][1]
        msgs += [{"role": "user", "content": "What verse comes after this one? " + text},
                 {"role": "assistant", "content": nxt}]
        if rng.random() < 0.4 and i + 2 < len(verses):
            msgs += [{"role": "user", "content": "And the next?"},
                     {"role": "assistant", "content": verses[i + 2][1]}]
    return msgs


def lookup_call(book, ch, vn):
    return {"type": "function",
            "function": {"name": "lookup_verse",
                         "arguments": {"book": book, "chapter": ch, "verse": vn}}}


def make_tool_sample(chapters, rng):
    """(messages, tools): a lookup request answered with a lookup_verse call; most samples also
    carry the tool's response and the final answer quoting it."""
    book, ch, verses = rng.choice(chapters)
    vn, text = rng.choice(verses)
    ref = ref_str(book, ch, vn)
    msgs = []
    if rng.random() < 0.5:
        msgs.append({"role": "system", "content": rng.choice(SYSTEM_PROMPTS)})
    msgs.append({"role": "user", "content": rng.choice(LOOKUP_PHRASES).format(ref=ref)})
    msgs.append({"role": "assistant", "content": "", "tool_calls": [lookup_call(book, ch, vn)]})
    if rng.random() < 0.7:
        msgs.append({"role": "tool", "content": text})
        msgs.append({"role": "assistant", "content": "%s says: %s" % (ref, text)})
    elif rng.random() < 0.3:
        # An ordinary request with tools present: answer without calling.
        b2, c2, vs2 = rng.choice(chapters)
        v2, t2 = rng.choice(vs2)
        start, rest = first_words(t2, rng)
        if start is not None:
            msgs = msgs[:-2] + [{"role": "user", "content": "Continue: " + start},
                                {"role": "assistant", "content": rest}]
    return msgs, [LOOKUP_TOOL]


def plain_document(chapters, rng):
    """A run of consecutive verses of one chapter, one verse per line."""
    book, ch, verses = rng.choice(chapters)
    n = len(verses)
    if rng.random() < 0.3:
        a, b = 0, n
    else:
        a = rng.randrange(n)
        b = min(n, a + rng.randint(3, 25))
    return "\n".join(t for _, t in verses[a:b])


# ---------------------------------------------------------------------------------------------
# Byte-level BPE

def bytes_to_unicode():
    """GPT-2's byte -> printable unicode character map."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


BYTE_ENC = bytes_to_unicode()
BYTE_DEC = {v: k for k, v in BYTE_ENC.items()}
_PRE = regex.compile(QWEN35_PRETOKENIZER_REGEX)
_SPECIAL_SPLIT = re.compile("(" + "|".join(re.escape(s) for s in
                                           sorted(SPECIAL_TOKENS, key=len, reverse=True)) + ")")


def pretokenize(text):
    """Pieces of one special-free chunk (NFC first, then the regex; gaps kept as pieces)."""
    s = unicodedata.normalize("NFC", text)
    out, prev = [], 0
    for m in _PRE.finditer(s):
        if m.start() > prev:
            out.append(s[prev:m.start()])
        if m.end() > m.start():
            out.append(m.group(0))
        prev = m.end()
    if prev < len(s):
        out.append(s[prev:])
    return out


def train_bpe(texts, n_merges):
    """Deterministic BPE over pre-token words weighted by count. Ties: smallest (a, b) ids."""
    counts = defaultdict(int)
    for t in texts:
        for chunk in _SPECIAL_SPLIT.split(t):
            if chunk in SPECIAL_TOKENS or not chunk:
                continue
            for p in pretokenize(chunk):
                counts[p.encode("utf-8")] += 1
    words = sorted(counts.items())
    syms = [list(w) for w, _ in words]
    wc = [c for _, c in words]
    tok_bytes = [bytes([b]) for b in range(256)]
    id_of = {b: i for i, b in enumerate(tok_bytes)}
    pair_count = defaultdict(int)
    where = defaultdict(set)
    for wi, s in enumerate(syms):
        for a, b in zip(s, s[1:]):
            pair_count[(a, b)] += wc[wi]
            where[(a, b)].add(wi)
    merges = []
    import heapq
    heap = [(-c, a, b) for (a, b), c in pair_count.items()]
    heapq.heapify(heap)
    while len(merges) < n_merges and heap:
        negc, a, b = heapq.heappop(heap)
        if pair_count.get((a, b), 0) != -negc or negc >= 0:
            continue
        text = tok_bytes[a] + tok_bytes[b]
        if text in id_of:
            nid = id_of[text]
        else:
            nid = len(tok_bytes)
            tok_bytes.append(text)
            id_of[text] = nid
        merges.append((a, b))
        delta = defaultdict(int)
        for wi in sorted(where.pop((a, b), ())):
            s = syms[wi]
            m, i = [], 0
            while i < len(s):
                if i + 1 < len(s) and s[i] == a and s[i + 1] == b:
                    m.append(nid)
                    i += 2
                else:
                    m.append(s[i])
                    i += 1
            if len(m) == len(s):
                continue
            c = wc[wi]
            for p in zip(s, s[1:]):
                delta[p] -= c
            for p in zip(m, m[1:]):
                delta[p] += c
                where[p].add(wi)
            syms[wi] = m
        for p, d in delta.items():
            if d == 0:
                continue
            n = pair_count.get(p, 0) + d
            if n <= 0:
                pair_count.pop(p, None)
            else:
                pair_count[p] = n
                heapq.heappush(heap, (-n, p[0], p[1]))
    return tok_bytes, merges


def tokenizer_json(tok_bytes, merges):
    n_model = len(tok_bytes)
    level = ["".join(BYTE_ENC[b] for b in t) for t in tok_bytes]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                  "use_regex": False}
    j = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": n_model + i, "content": s, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}
                         for i, s in enumerate(SPECIAL_TOKENS)],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN35_PRETOKENIZER_REGEX},
             "behavior": "Isolated", "invert": False},
            byte_level]},
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": False,
                  "byte_fallback": False, "ignore_merges": False,
                  "vocab": {level[i]: i for i in range(n_model)},
                  "merges": [level[a] + " " + level[b] for a, b in merges]},
    }
    return json.dumps(j, indent=2, ensure_ascii=False) + "\n"


class Tokenizer:
    """Encoder/decoder for a tokenizer.json written by tokenizer_json()."""

    def __init__(self, path):
        j = json.load(open(path, encoding="utf-8"))
        self.vocab = {k: v for k, v in j["model"]["vocab"].items()}
        self.id_to_bytes = {}
        for k, v in self.vocab.items():
            self.id_to_bytes[v] = bytes(BYTE_DEC[c] for c in k)
        self.ranks = {}
        for r, m in enumerate(j["model"]["merges"]):
            a, b = m.split(" ")
            self.ranks[(a, b)] = r
        self.special = {t["content"]: t["id"] for t in j["added_tokens"]}
        for s, i in self.special.items():
            self.id_to_bytes[i] = s.encode("utf-8")
        self.vocab_size = 1 + max(self.id_to_bytes)
        self.cache = {}

    def _bpe(self, piece):
        if piece in self.cache:
            return self.cache[piece]
        parts = [BYTE_ENC[b] for b in piece.encode("utf-8")]
        while len(parts) > 1:
            best, bi = None, -1
            for i in range(len(parts) - 1):
                r = self.ranks.get((parts[i], parts[i + 1]))
                if r is not None and (best is None or r < best):
                    best, bi = r, i
            if best is None:
                break
            parts = parts[:bi] + [parts[bi] + parts[bi + 1]] + parts[bi + 2:]
        ids = [self.vocab[p] for p in parts]
        self.cache[piece] = ids
        return ids

    def encode(self, text):
        ids = []
        for chunk in _SPECIAL_SPLIT.split(text):
            if not chunk:
                continue
            if chunk in self.special:
                ids.append(self.special[chunk])
                continue
            for p in pretokenize(chunk):
                ids.extend(self._bpe(p))
        return ids

    def decode(self, ids):
        return b"".join(self.id_to_bytes[i] for i in ids).decode("utf-8", errors="replace")
