"""The Unicode torture text of the tokenizer golden tests, as bytes, one case per line (no b"\\n" inside).

CJK, emoji with ZWJ sequences, flags and skin tones, combining marks (NFC and NFD spellings), Hangul, RTL
scripts with direction marks, control characters (C0, DEL, C1 with NEL), Unicode spaces, long runs of spaces,
tabs and digits, contractions in both cases, case-folding traps, special-token texts whole and broken, and
invalid UTF-8 (lone continuation bytes, overlong forms, surrogates, truncated sequences, bytes above F4).
"""


def lines():
    text = [
        "中文分词测试：我爱北京天安门。日本語のテキスト、カタカナとひらがな。한국어 텍스트 한글 자모 각",
        "Emoji: 👍 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇫🇷🇯🇵 ❤️ 🧑🏿‍🚀 1️⃣ #️⃣ 🫠🪿",
        "Combining: e\u0301 é ñ n\u0303 Z\u0351\u0334\u0337a\u0308\u0313l\u0316g\u0310o\u036a  \u0301lone mark",
        "NFKC: ﬁ ﬂ ① ⅷ ｆｕｌｌｗｉｄｔｈ ＡＢＣ ² ³ ½ ℌ ℍ ™ ㎒ ﾊﾝｶｸ",
        "RTL: שלום עולם \u200fمرحبا بالعالم\u200e العربية 123 \u202bembedded\u202c \u2067isolate\u2069",
        "Controls: a\x00b\x01c\x07d\x08e\x0bf\x0cg\x1bh\x1fi\x7fj\x85k\x9fl\u2028m\u2029n\r",
        "Spaces: a\u00a0b\u1680c\u2000d\u2003e\u2009f\u200ag\u202fh\u205fi\u3000j\u180ek\u200bl\ufeffm",
        " leading space, trailing spaces   ",
        " " * 1000,
        "x" + " " * 5000 + "y",
        "\t\t\t tabs \t and  \t  mixed   \n".rstrip("\n") + "\t",
        "0123456789" * 1000,
        "digits 1 12 123 1234 12345 3.14159 1,000,000 ١٢٣ ४५६ ½",
        "Contractions: it's IT'S they'll THEY'LL we've WE'VE I'm I'M you'd YOU'D she’s don't ’s 's 'S",
        "Case traps: ſ ſtraße Kelvin K Å ǅ ǈ İstanbul ΣΑΣ σας ß ẞ ﬀ",
        "Special texts: <|endoftext|> mid<|endoftext|>word <|endoftext <|begin_of_text|>x<|end_of_text|> <|eot_id|>",
        "Added: <mask> word <mask>word  <mask>  the Lord God said, Lord God, LordGod",
        "Punctuation!!! ??? ... --- *** ((( ))) [[[ ]]] {{{ }}} <<< >>> @@@ ### $$$ %%% ^^^ &&& ~~~ ``` '''",
        "URL https://example.com/path?q=1&r=2#frag email a.b@example.org C:\\Windows\\path",
        "Mixed scripts: Ελληνικά Кириллица ქართული Հայերեն ไทย ລາວ ဗမာ ខ្មែរ தமிழ் हिन्दी বাংলা",
        "Private use and noncharacters: \ue000 \uf8ff \ufffe \uffff \U0010fffd \U0001f600\U0010ffff",
        "",
    ]
    out = [t.encode("utf-8", "surrogatepass") for t in text]
    invalid = [
        b"lone continuation \x80 \xbf end",
        b"overlong \xc0\xaf \xe0\x80\xaf \xc1\xbf",
        b"surrogates \xed\xa0\x80 \xed\xbf\xbf",
        b"truncated \xe2\x82 \xf0\x9f\x98 \xc3",
        b"above F4 \xf4\x90\x80\x80 \xf5\x80 \xff\xfe",
        b"\xe4\xb8\xad\xe6\x96 mixed valid and invalid \xe6\x96\x87",
    ]
    return out + invalid


def write(path):
    data = b"\n".join(lines()) + b"\n"
    with open(path, "wb") as f:
        f.write(data)
    return data
