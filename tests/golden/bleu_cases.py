# Golden values for tests/unit/test_bleu.cpp from sacreBLEU (pinned in scripts/setup.sh): 13a
# tokenizations of tricky lines and corpus BLEU of small edge-case corpora, as JSON on stdout.
import json
import sacrebleu
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

TOKENIZE = [
    "Hello, world!",
    "In 1,000.50 years (Gen. 1:1-3) it cost $5 & more.",
    "a..b,,c 3.14, 2,5. x-y 10-20 -5 well-known 'quoted' \"double\"",
    "&quot;x&quot; &amp;amp; &lt;tag&gt; <skipped>gone",
    "¿Dónde está? ¡Aquí! Señor Jesús, amén.",
    "tabs\tand\u00a0nbsp\u2003em-space  and\u3000ideographic",
    "x{y}z[w]v^u_t`s~r|q@p=o?n>m<l;k:j/i*h+g)f(e%d#c",
    "end.",
    "",
]

CORPORA = {
    "two_sentences": (["the cat sat on the mat", "a dog barked loudly at night"],
                      ["the cat sat on a mat", "the dog barked loudly at night"]),
    "no_unigram_match": (["x y z w"], ["a b c d"]),
    "no_4gram_match": (["a b c x d e f"], ["a b c d e f"]),
    "short_hyp": (["a b"], ["a b c d e f g h"]),
    "empty_lines": (["", "the cat", ""], ["", "the cat sat", "a dog"]),
}

if __name__ == "__main__":
    tok = Tokenizer13a()
    corpora = {}
    for name, (hyps, refs) in CORPORA.items():
        b = sacrebleu.corpus_bleu(hyps, [refs])
        corpora[name] = {"hyps": hyps, "refs": refs, "score": b.score, "precisions": b.precisions, "bp": b.bp,
                         "hyp_len": b.sys_len, "ref_len": b.ref_len}
    print(json.dumps({"tokenize": [[s, tok(s)] for s in TOKENIZE], "corpora": corpora}))
