"""Training corpus and golden texts for make_tokenizer_goldens.py (all written for this project).

The corpus mixes the kinds of text the pre-tokenizer regexes treat differently: English prose and
contractions, source code with indentation and tabs, CJK, Cyrillic, Arabic, combining marks in
both composed and decomposed form, emoji (with joiners and modifiers), digit runs, whitespace
runs and CRLF line ends.
"""

import random

PROSE = [
    "The harbour was quiet when the first boats came back, their sails folded like tired wings.",
    "She didn't think the bridge would hold, but it's been standing for ninety-seven years.",
    "We'll meet at the library; I've got the notes, and you'd better bring the maps.",
    "Weather reports said the storm wouldn't reach the coast before Thursday evening.",
    "A small fleet of ships can carry more cargo than one giant vessel, if they're well organised.",
    "Training a language model means predicting the next token, again and again, for billions of steps.",
    "The committee's decision surprised everyone: they'd voted to rebuild the old lighthouse.",
    "Ask the captain whether the crew has eaten; they're hungry and they've worked since dawn.",
    "It was the best of plans, it was the worst of plans, and nobody could tell which.",
    "Numbers matter: 42 ships, 1,250 sailors, 3.5 million litres of fuel and 0.75 tonnes of rope.",
    "Dr. Smith's lab measured 12.5 ms latency on 8 GPUs, versus 31.2 ms on 2 GPUs.",
    "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG, AND IT'S NOT SORRY.",
    "I'M SURE WE'LL FIND IT; YOU'D THINK IT'S OBVIOUS, BUT IT ISN'T.",
    "Mr. O'Neil's boat, the 'Sea Lark', won the race in 2019 and again in 2023.",
    "Email ops@example.org or visit https://example.org/docs/v2/index.html?lang=en#start for help.",
]

CODE = [
    "def train(model, data, steps=1000):\n    for step in range(steps):\n        loss = model(data[step])\n"
    "        loss.backward()\n    return loss\n",
    "int main(int argc, char** argv) {\n\tif (argc < 2) {\n\t\treturn 1;\n\t}\n\tprintf(\"%d\\n\", argc);\n}\n",
    "for (size_t i = 0; i < n; ++i) {\n  out[i] = a[i] * b[i] + c[i];  // fused multiply-add\n}\n",
    "{\"name\": \"flotilla\", \"version\": \"0.1.0\", \"ranks\": [0, 1, 2, 3], \"ok\": true}\n",
    "SELECT id, name FROM runs WHERE status = 'done' AND step > 1000 ORDER BY id DESC;\n",
    "    if x == 0:\n        pass\n    elif x > 10 and y < -3:\n        x, y = y, x\n",
    "#include <vector>\n#include <string>\n\nstd::vector<std::string> words;\n",
    "const total = items.reduce((acc, it) => acc + it.price * it.qty, 0);\r\nconsole.log(total);\r\n",
]

CJK = [
    "今天天气很好，我们去公园散步吧。",
    "机器学习模型需要大量的数据和计算资源。",
    "东京の桜はとても美しいです。春になると多くの人が花見に行きます。",
    "한국어 문장도 포함되어 있습니다. 오늘은 날씨가 맑습니다.",
    "中文、日本語、한국어が混ざった文章：ＡＢＣ１２３。",
    "船队在港口等待风向改变，然后一起出发。",
]

CYRILLIC = [
    "Сегодня хорошая погода, и мы пойдём гулять в парк.",
    "Модель обучается на большом корпусе текстов, это занимает много времени.",
    "Корабли вернулись в гавань к вечеру; капитан был доволен.",
    "Україна, Беларусь і Болгарія теж пишуть кирилицею.",
]

ARABIC = [
    "الطقس جميل اليوم، وسنذهب إلى الحديقة.",
    "تتعلم النماذج اللغوية من كميات كبيرة من النصوص.",
    "عاد الأسطول إلى الميناء في المساء ١٢٣ سفينة.",
]

COMBINING = [
    "Café, naïve, résumé, Zürich, São Paulo, Ångström, façade.",
    "Cafe\u0301, nai\u0308ve, re\u0301sume\u0301, Zu\u0308rich, Sa\u0303o Paulo, A\u030angstro\u0308m.",
    "Tiếng Việt có nhiều dấu: người, được, những, thưởng thức.",
    "Tie\u0302\u0301ng Vie\u0323\u0302t (decomposed) and e\u0301\u0301 double accents.",
    "Ελληνικά: καλημέρα, ευχαριστώ, Ωραία μέρα.",
]

EMOJI = [
    "Launch day 🚀🚀 went well 😀 and the team 👩‍💻👨‍💻 celebrated 🎉.",
    "Family: 👨‍👩‍👧‍👦, thumbs: 👍🏽👍🏿, flags: 🇫🇷🇯🇵🇧🇷, hearts: ❤️💙💚.",
    "Weather ☀️ then 🌧️ then ⛈️; ship ⛵ and anchor ⚓.",
]

DIGITS = [
    "1234567890 12345678901234567890 007 0.0001 3.14159265358979",
    "Phone +1 (555) 010-2030, order #98765-4321, year 1999-2024.",
    "Arabic-Indic ١٢٣٤٥٦٧٨٩٠ and full-width １２３４５ and superscripts x² y³ ½ ¼.",
    "Version 10.2.3-beta.4 built at 2024-03-15T12:34:56Z with 65536 tokens.",
]

WHITESPACE = [
    "Two  spaces,   three   spaces,    four    spaces.",
    "Trailing spaces   \nand leading spaces\n    indented line\n\n\nthree blank lines above",
    "Tabs\there\t\tand\t\t\tthere\n\tindented with a tab\n",
    "Windows line ends\r\nsecond line\r\n\r\nafter a blank line\r\n",
    "Mixed \t \t whitespace \u00a0 no-break \u3000 ideographic \u2003 em space.",
    "   \n  \n\t\n",
]


def corpus(repeats: int = 6, seed: int = 7) -> list[str]:
    """Training lines: every sample several times, plus shuffled recombinations."""
    rng = random.Random(seed)
    groups = [PROSE, CODE, CJK, CYRILLIC, ARABIC, COMBINING, EMOJI, DIGITS, WHITESPACE]
    lines = []
    for _ in range(repeats):
        for g in groups:
            lines.extend(g)
    for _ in range(300):
        parts = [rng.choice(rng.choice(groups)) for _ in range(rng.randint(1, 3))]
        lines.append(rng.choice(["", " ", "\n", "\t", "  "]).join(parts))
    for i in range(200):
        lines.append(f"Step {i * 37} of {i * 91 + 13}: loss {1.0 / (i + 1):.4f}, lr {3e-4 * (i % 7):.2e}")
    return lines


GOLDEN = [
    ("empty", ""),
    ("space", " "),
    ("single_letter", "a"),
    ("leading_spaces", "   hello world"),
    ("trailing_spaces", "hello world   "),
    ("both_spaces", "  padded on both sides  "),
    ("newline_only", "\n"),
    ("english", PROSE[0] + " " + PROSE[1]),
    ("contractions", "I'm sure you're right; they've said we'll go, he'd agree, it's isn't it? don't."),
    ("contractions_upper", "I'M YOU'RE THEY'VE WE'LL HE'D IT'S DON'T 'S 'T 'RE 'VE 'M 'LL 'D"),
    ("contractions_odd", "x'ſ y'Ş z'ẞ w'K 's's 'll'll ''s '"),
    ("code_python", CODE[0]),
    ("code_c_tabs", CODE[1]),
    ("code_json", CODE[3]),
    ("code_crlf", CODE[7]),
    ("cjk_chinese", CJK[0] + CJK[1]),
    ("cjk_japanese", CJK[2]),
    ("cjk_korean", CJK[3]),
    ("cjk_mixed_fullwidth", CJK[4]),
    ("cyrillic", CYRILLIC[0] + " " + CYRILLIC[3]),
    ("arabic", ARABIC[0] + " " + ARABIC[2]),
    ("combining_composed", COMBINING[0]),
    ("combining_decomposed", COMBINING[1]),
    ("vietnamese", COMBINING[2] + " " + COMBINING[3]),
    ("greek", COMBINING[4]),
    ("emoji", EMOJI[0]),
    ("emoji_zwj_flags", EMOJI[1]),
    ("emoji_variation", EMOJI[2]),
    ("digits_runs", DIGITS[0]),
    ("digits_long", "3" * 40 + " " + "1234567890" * 5),
    ("digits_other_scripts", DIGITS[2]),
    ("digits_mixed", DIGITS[1] + " " + DIGITS[3]),
    ("whitespace_runs", WHITESPACE[0]),
    ("whitespace_lines", WHITESPACE[1]),
    ("tabs", WHITESPACE[2]),
    ("crlf", WHITESPACE[3]),
    ("unicode_spaces", WHITESPACE[4]),
    ("only_whitespace", WHITESPACE[5]),
    ("space_before_newline", "word \nword  \n  word\t\nword"),
    ("cr_only", "old mac\rline\r\rend"),
    ("odd_spaces", "a\u180eb c\u0085d e\u00a0f g\u200bh i\u2028j k\u2029l m\u001cn o\u000bp"),
    ("mongolian_separator", "a \u180eb !\u180e! \u180e\u180e  x\t\u180e\n \u180e"),
    ("punctuation", "Hello!!! What?? ... --- *** ((nested)) [brackets] {braces} <angles> @#$%^&*_+=~`|\\/"),
    ("punct_newlines", "end.\n\nnext!\n\n\n?\r\n;\n"),
    ("url_markdown", "See [the docs](https://example.org/a/b?c=1&d=2) and `code` or **bold** _em_."),
    ("special_eot", "Hello<|endoftext|>world"),
    ("special_eot_spaced", "first document <|endoftext|> second document"),
    ("special_chatml", "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n"),
    ("special_llama", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"),
    ("special_near_miss", "<|im_star|> <|endoftext| <|end_of_text|><||> <|eot_id"),
    ("special_adjacent", "<|endoftext|><|endoftext|>a<|im_end|><|im_end|>"),
    ("think_tags", "<think>\nreasoning here\n</think>\n\nThe answer is 4."),
    ("added_lstrip", "fill in   <|mask|> here and\t<|mask|>there"),
    ("added_rstrip", "left<|sep|>   right <|sep|>\n\nnext"),
    ("added_single_word", "use [CODE] here, not x[CODE]y or [CODE]s, but ([CODE]) works"),
    ("added_normalized", "cafe\u0301 au lait, café noir, Angstro\u0308m"),
    ("mixed_scripts", "English, Русский, 中文, العربية, ελληνικά, 한국어, हिन्दी, ไทย in one line."),
    ("repeat_letters", "a" * 700),
    ("repeat_spaces", " " * 700 + "x"),
    ("repeat_newlines", "\n" * 300 + "end"),
    ("repeat_pairs", "ab" * 350),
    ("repeat_emoji", "😀" * 100),
    ("repeat_word", "the " * 200),
    ("repeat_digits", "9" * 400),
    ("repeat_cjk", "船" * 150),
]


def fuzz_texts(count: int = 80, seed: int = 11) -> list[tuple[str, str]]:
    """Random strings over an alphabet that stresses the regexes' class boundaries."""
    rng = random.Random(seed)
    atoms = list("abcXYZ019 .,'!?-_") + [
        " ", "  ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u3000", "\u180e", "\u0085", "\u2003",
        "船", "語", "한", "я", "Ж", "ع", "é", "e\u0301", "\u0308", "ß", "ſ", "😀", "👍🏽", "‍", "١", "²", "Ⅳ",
        "'s", "'T", "'ll", "'RE", "<|", "|>", "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<think>",
        "[CODE]", "<|mask|>", "<|sep|>", "café",
    ]
    out = []
    for i in range(count):
        n = rng.randint(1, 40)
        out.append((f"fuzz_{i:03d}", "".join(rng.choice(atoms) for _ in range(n))))
    return out


# Split-regex cases: (pattern, subjects). Constructs whose meaning differs between Oniguruma and
# PCRE2 (\s, \w, \h, ^/$, {,n}) and the library's behaviours, recorded from the library's own split.
REGEX_CASES = [
    (r"\s+", ["a \u180e b\u0085c\u00a0d\u001ce\u3000f", "  x  "]),
    (r"\S+", ["a\u180eb c\u2028d"]),
    (r"\w+", ["abc_d\u0301e \u00b2\u2160\u203f x-y \u200d\u0663"]),
    (r"\W+", ["ab, c\u0301d!?"]),
    (r"[\s\w]+", ["ab c!\u180e d\u0301."]),
    (r"[^\s\p{L}]+", ["ab 12!? \u180e,"]),
    (r"\h+", ["0x1F az 9aB"]),
    (r"\d+", ["1\u00b2\u0663\u2160 42"]),
    (r"^\w+|\w+$", ["first mid\nsecond line\nlast"]),
    (r"a.c", ["abc a\nc a\rc"]),
    (r"x{,2}y", ["xxxy y xy"]),
    (r"\p{N}{1,3}", ["1234567 ١٢٣٤"]),
    (r"(?i:'s|'t|'re)", ["it'S he'RE x'ſ 'T"]),
    (r"\u00e9+", ["caf\u00e9\u00e9 e"]),
]
BEHAVIOR_SUBJECTS = ["a-b--c-", "-start and end-", "no dash", "---"]
