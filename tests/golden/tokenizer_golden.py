"""loom's tokenizers against the references: Hugging Face `tokenizers` and `tiktoken` (pinned in
scripts/setup.sh), id for id, on Bible texts and the Unicode torture text (unicode_torture.py).

Usage: tokenizer_golden.py --loom LOOM --work DIR --gpt2-ranks gpt2.tiktoken --corpus NAME=FILE ...

Tokenizers, made here at test time:
  kjv-bpe      byte-level BPE trained by `tokenizers` on the first corpus (vocab 2000): NFC, ByteLevel with
               add_prefix_space, special and added tokens with lstrip / single_word, a bos/eos template, merges
               written as "a b" strings
  kjv-llama    the same trained Llama-3 style: NFKC, Split on Llama 3's regex then ByteLevel without regex,
               ignore_merges, a <|begin_of_text|> template, merges as [a, b] pairs
  kjv-wordpiece  BERT's uncased WordPiece trained by `tokenizers` on the first corpus (vocab 2000): BertNormalizer
               (lowercase, accents stripped, CJK spaced), BertPreTokenizer, a [CLS] $A [SEP] template, the
               WordPiece decoder with its cleanup; also on every assigned code point (below), where the [UNK]s of the
               pieces show where the pre-tokenizer cut
  kjv-wordpiece-cased  the same cased (accents kept), with the Whitespace pre-tokenizer (torture text only)
  bert-normalizer  every assigned code point (code_point_lines), space-separated, through
               BertNormalizer (uncased, then cased) and BertPreTokenizer into a BPE of only byte-fallback tokens:
               the ids spell the normalized text's bytes, so each code point's normalization is compared
  gpt2-hf      a tokenizer.json built by `tokenizers` from GPT-2's real ranks (vocab + merges)
  gpt2         gpt2.tiktoken with GPT-2's pattern, against tiktoken's Encoding of the same file and pattern
  llama3-gpt2  gpt2.tiktoken with Llama 3's pattern and its 256 special tokens
  cl100k-gpt2, o200k-gpt2   the other named patterns over GPT-2's ranks (torture text only)
Each runs on every corpus but gpt2-hf and llama3-gpt2 (the first corpus and the torture text).
For each, `loom encode` must give the reference's ids on every line, `loom decode` of those ids the
reference's decode, and decode(encode(x)) == x on every line where the reference round-trips. Invalid UTF-8
goes to the reference as Python's bytes.decode("utf-8", "replace"), which is what loom does with it.
Also: special tokens as plain text (--no-special-in-text: tiktoken's encode_ordinary, tokenizers'
encode_special_tokens) and the post-processor (--add-special-tokens) on the torture text.
"""
import argparse
import base64
import inspect
import json
import os
import re
import subprocess
import sys
import time
import unicodedata

import tiktoken
import tokenizers
from tiktoken_ext import openai_public
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

sys.path.insert(0, os.path.dirname(__file__))
import unicode_torture  # noqa: E402

LLAMA3_PATTERN = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
LLAMA3_SPECIAL = (["<|begin_of_text|>", "<|end_of_text|>"] + [f"<|reserved_special_token_{i}|>" for i in range(4)] +
                  ["<|start_header_id|>", "<|end_header_id|>", "<|reserved_special_token_4|>", "<|eot_id|>"] +
                  [f"<|reserved_special_token_{i}|>" for i in range(5, 251)])


def train_kjv_bpe(text_file, out):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=2000, special_tokens=["<|endoftext|>", "<|bos|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train([text_file], trainer)
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True, normalized=False)])
    tok.add_tokens([AddedToken("Lord God", single_word=True, normalized=True)])
    bos, eos = tok.token_to_id("<|bos|>"), tok.token_to_id("<|endoftext|>")
    tok.post_processor = processors.TemplateProcessing(single="<|bos|> $A <|endoftext|>",
                                                       special_tokens=[("<|bos|>", bos), ("<|endoftext|>", eos)])
    tok.save(out)
    spec = json.load(open(out))
    spec["model"]["merges"] = [m if isinstance(m, str) else f"{m[0]} {m[1]}" for m in spec["model"]["merges"]]
    json.dump(spec, open(out, "w"), ensure_ascii=False)
    return Tokenizer.from_file(out)


def train_kjv_wordpiece(text_file, out, lowercase):
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer() if lowercase else pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=2000, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
                                        show_progress=False)
    tok.train([text_file], trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls),
                                                                                               ("[SEP]", sep)])
    tok.save(out)
    return tok


def bert_normalizer_bytes(out, lowercase):
    vocab = {f"<0x{b:02X}>": b for b in range(256)}
    vocab["[UNK]"] = 256
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="[UNK]", byte_fallback=True))
    tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.ByteFallback()
    tok.save(out)
    return tok


def code_point_lines(separator, per_line=2000):
    """Every code point assigned in Python's Unicode database but CR and LF (the line ends) and U+11938, Unicode 13's
    one new canonical composite, which the reference's older NFD tables do not decompose. (Code points assigned later
    than ICU's tables are lowercased by the reference's newer Rust tables only.)"""
    points = [c for c in range(1, 0x110000) if unicodedata.category(chr(c)) not in ("Cn", "Cs")
              and c not in (0x0A, 0x0D, 0x11938)]
    return [separator.join(map(chr, points[i:i + per_line])) for i in range(0, len(points), per_line)]


def train_kjv_llama(text_file, out):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.normalizer = normalizers.Sequence([normalizers.NFKC()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=2000, special_tokens=LLAMA3_SPECIAL[:10], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train([text_file], trainer)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                                       special_tokens=[("<|begin_of_text|>", bos)])
    tok.save(out)
    spec = json.load(open(out))
    assert spec["model"]["ignore_merges"] is True and isinstance(spec["model"]["merges"][0], list), "unexpected layout"
    return tok


def gpt2_tokenizer_json(ranks, out):
    """GPT-2's ranks as a Hugging Face ByteLevel BPE: vocab in the byte alphabet, and for each token every
    split into two lower-ranked tokens as a merge, by the token's rank (as transformers' tiktoken converter)."""
    alphabet = {b: c for b, c in zip(range(256), bytes_to_unicode())}
    as_text = lambda bs: "".join(alphabet[b] for b in bs)  # noqa: E731
    vocab = {as_text(token): rank for token, rank in ranks.items()}
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(token) < 2:
            continue
        splits = [(token[:i], token[i:]) for i in range(1, len(token))
                  if ranks.get(token[:i], rank) < rank and ranks.get(token[i:], rank) < rank]
        for a, b in sorted(splits, key=lambda ab: (ranks[ab[0]], ranks[ab[1]])):
            merges.append((as_text(a), as_text(b)))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)])
    assert tok.token_to_id("<|endoftext|>") == 50256
    tok.save(out)
    return tok


def bytes_to_unicode():
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, extra = [], 0
    for b in range(256):
        if b in printable:
            out.append(chr(b))
        else:
            out.append(chr(256 + extra))
            extra += 1
    return out


def load_ranks(path):
    ranks = {}
    for line in open(path, "rb"):
        if line.strip():
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


class HfReference:
    def __init__(self, tok):
        self.tok = tok

    def encode(self, lines, special_in_text=True, add_special=False):
        self.tok.encode_special_tokens = not special_in_text
        ids = [e.ids for e in self.tok.encode_batch(lines, add_special_tokens=add_special)]
        self.tok.encode_special_tokens = False
        return ids

    def decode(self, ids):
        return self.tok.decode_batch(ids, skip_special_tokens=False)


class TiktokenReference:
    def __init__(self, encoding):
        self.enc = encoding

    def encode(self, lines, special_in_text=True, add_special=False):
        assert not add_special
        if special_in_text:
            return self.enc.encode_batch(lines, allowed_special="all")
        return self.enc.encode_ordinary_batch(lines)

    def decode(self, ids):
        return [self.enc.decode(i) for i in ids]  # errors="replace"


def run_loom(loom, command, args, data):
    done = subprocess.run([loom, command, *args], input=data, capture_output=True)
    if done.returncode != 0:
        sys.exit(f"FAIL: loom {command} {' '.join(args)}: exit {done.returncode}: {done.stderr.decode(errors='replace')}")
    return done.stdout


def parse_ids(text):
    return [[int(x) for x in line.split()] for line in text.decode().split("\n")[:-1]]


def compare(name, corpus, lines, raw_lines, reference, loom, args, extra=(), **options):
    """Exits on the first tokenizer and corpus that differ, showing up to 5 of their lines."""
    label = f"{name} on {corpus}" + (f" ({' '.join(extra)})" if extra else "")
    expected = reference.encode(lines, **options)
    got = parse_ids(run_loom(loom, "encode", [*args, *extra], b"\n".join(raw_lines) + b"\n"))
    if len(got) != len(expected):
        sys.exit(f"FAIL: {label}: loom encoded {len(got)} lines, the reference {len(expected)}")
    bad = [i for i in range(len(lines)) if got[i] != expected[i]]
    for i in bad[:5]:
        first = next(k for k in range(min(len(got[i]), len(expected[i])) + 1)
                     if k >= min(len(got[i]), len(expected[i])) or got[i][k] != expected[i][k])
        print(f"  line {i + 1}: {lines[i][:120]!r}\n    reference {expected[i][max(0, first - 3):first + 8]}"
              f"\n    loom      {got[i][max(0, first - 3):first + 8]} (from token {first})", file=sys.stderr)
    if bad:
        sys.exit(f"FAIL: {label}: {len(bad)} of {len(lines)} lines differ")
    n_ids = sum(len(x) for x in expected)
    if extra:
        print(f"{label}: {len(lines)} lines, {n_ids} ids equal")
        return
    decoded = reference.decode(expected)
    ids_text = "\n".join(" ".join(map(str, x)) for x in expected) + "\n"
    loom_decoded = run_loom(loom, "decode", args, ids_text.encode()).decode("utf-8").split("\n")[:-1]
    bad = [i for i in range(len(lines)) if loom_decoded[i] != decoded[i]]
    if bad:
        i = bad[0]
        sys.exit(f"FAIL: {label}: decode differs on {len(bad)} lines, first line {i + 1}: "
                 f"reference {decoded[i][:80]!r}, loom {loom_decoded[i][:80]!r}")
    round_trips = [i for i in range(len(lines)) if decoded[i] == lines[i]]
    assert all(loom_decoded[i] == lines[i] for i in round_trips)
    n_bytes = sum(len(r) + 1 for r in raw_lines)
    print(f"{label}: {len(lines)} lines, {n_bytes} bytes -> {n_ids} ids equal; decode equal; "
          f"decode(encode(x)) == x on {len(round_trips)} lines (the reference: the same)")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--loom", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--gpt2-ranks", required=True)
    p.add_argument("--corpus", action="append", default=[], help="NAME=FILE, one line per document")
    a = p.parse_args()
    print(f"references: tokenizers {tokenizers.__version__}, tiktoken {tiktoken.__version__}")
    os.makedirs(a.work, exist_ok=True)
    corpora = [(name, open(path, "rb").read().split(b"\n")[:-1]) for name, path in (c.split("=", 1) for c in a.corpus)]
    torture = unicode_torture.lines()
    corpora.append(("unicode-torture", torture))
    first_text = a.corpus[0].split("=", 1)[1]

    t0 = time.time()
    ranks = load_ranks(a.gpt2_ranks)
    specs = {}  # name -> (loom args, reference, corpora it runs on)
    bible = [c for c, _ in corpora]
    path = os.path.join(a.work, "kjv-bpe.json")
    specs["kjv-bpe"] = (["--tokenizer", path], HfReference(train_kjv_bpe(first_text, path)), bible)
    path = os.path.join(a.work, "kjv-llama.json")
    specs["kjv-llama"] = (["--tokenizer", path], HfReference(train_kjv_llama(first_text, path)), bible)
    path = os.path.join(a.work, "kjv-wordpiece.json")
    specs["kjv-wordpiece"] = (["--tokenizer", path], HfReference(train_kjv_wordpiece(first_text, path, True)),
                              bible + ["code-points"])
    path = os.path.join(a.work, "kjv-wordpiece-cased.json")
    specs["kjv-wordpiece-cased"] = (["--tokenizer", path], HfReference(train_kjv_wordpiece(first_text, path, False)),
                                    ["unicode-torture"])
    corpora.append(("code-points", [line.encode() for line in code_point_lines("")]))
    # Spaced, so that NFD does not reorder runs of marks assigned after the reference's Unicode version.
    corpora.append(("code-points-spaced", [line.encode() for line in code_point_lines(" ")]))
    for case, lowercase in (("uncased", True), ("cased", False)):
        path = os.path.join(a.work, f"bert-normalizer-{case}.json")
        specs[f"bert-normalizer-{case}"] = (["--tokenizer", path], HfReference(bert_normalizer_bytes(path, lowercase)),
                                            ["code-points-spaced"])
    path = os.path.join(a.work, "gpt2-hf.json")
    # GPT-2's ranks again through a tokenizer.json and under Llama 3's pattern: the same ids as "gpt2" on the Bibles
    # but for the pattern's edge cases, which the torture text holds; the first Bible is enough for the rest.
    some = [bible[0], "unicode-torture"]
    specs["gpt2-hf"] = (["--tokenizer", path], HfReference(gpt2_tokenizer_json(ranks, path)), some)
    gpt2_special = {"<|endoftext|>": 50256}
    llama_special = {t: len(ranks) + i for i, t in enumerate(LLAMA3_SPECIAL)}
    enc = lambda name, pat, special: tiktoken.Encoding(name, pat_str=pat, mergeable_ranks=ranks, special_tokens=special)  # noqa: E731
    specs["gpt2"] = (["--tokenizer", a.gpt2_ranks, "--pattern", "gpt2"],
                     TiktokenReference(enc("gpt2", openai_public.r50k_pat_str, gpt2_special)), bible)
    specs["llama3-gpt2"] = (["--tokenizer", a.gpt2_ranks, "--pattern", "llama3"],
                            TiktokenReference(enc("llama3", LLAMA3_PATTERN, llama_special)), some)
    for name, preset in (("cl100k_base", "cl100k"), ("o200k_base", "o200k")):
        specs[f"{preset}-gpt2"] = (["--tokenizer", a.gpt2_ranks, "--pattern", name, "--special-tokens", "gpt2"],
                                   TiktokenReference(enc(name, named_pattern(name), gpt2_special)),
                                   ["unicode-torture"])
    print(f"tokenizers built in {time.time() - t0:.1f} s")

    for name, (args, reference, where) in specs.items():
        for corpus, raw in corpora:
            if corpus not in where:
                continue
            lines = [r.decode("utf-8", "replace") for r in raw]
            compare(name, corpus, lines, raw, reference, a.loom, args)
    lines = [r.decode("utf-8", "replace") for r in torture]
    for name in ("kjv-bpe", "gpt2", "llama3-gpt2"):
        args, reference, _ = specs[name]
        compare(name, "unicode-torture", lines, torture, reference, a.loom, args, ["--no-special-in-text"],
                special_in_text=False)
    for name in ("kjv-bpe", "kjv-llama", "kjv-wordpiece"):
        args, reference, _ = specs[name]
        compare(name, "unicode-torture", lines, torture, reference, a.loom, args, ["--add-special-tokens"],
                add_special=True)
    print("PASS")


def named_pattern(name):
    """The pat_str of tiktoken's own definition of an encoding (its ranks are not needed, nor downloaded)."""
    source = inspect.getsource(getattr(openai_public, name))
    if name == "cl100k_base":
        return re.search(r'"pat_str": r"""(.*?)"""', source).group(1)
    parts = re.search(r"pat_str = \"\|\"\.join\(\s*\[(.*?)\]\s*\)", source, re.S).group(1)
    return "|".join(re.findall(r'r"""(.*?)"""', parts))


if __name__ == "__main__":
    main()
