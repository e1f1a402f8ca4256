#!/usr/bin/python3
"""The --rename regexes of `fix --like` (issue 51) judged by Python's own re.

Run:  /usr/bin/python3 tests/interop/test_key_regex.py --tool build/tests/key_regex_tool

For every (pattern, replacement, key) below, and for thousands of random
patterns over a small alphabet matched against random keys, ckptfix's Pike
VM (src/passes/key_regex.*) must give what re.sub(pattern, replacement, key)
and re.search(pattern, key) give: the same result, the same match and
groups; and refuse exactly what re refuses (or what ckptfix documents it
does not support: lookarounds, backreferences, named groups). Pathological
patterns, which make a backtracking engine take exponential time, must take
the time of any other.
"""
import argparse
import os
import random
import re
import subprocess
import sys
import time
import unittest

TOOL = None

KEYS = ["module.features.0.weight", "_orig_mod.module.l0", "bert.encoder.layer.11.attention.self.query.bias",
        "model.backbone.bottom_up.res2.0.conv1.weight", "features.denseblock1.denselayer1.norm.1.weight",
        "encoder.LayerNorm.gamma", "conv.weight_g", "x", "", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaac", "a.b.c.d.e.f.g",
        "layers.0.attn.q_proj.weight", "fc.bias\tweird", "blocks.10.mlp.fc2.weight"]

CASES = [
    (r"^module\.", ""), (r"module\.", ""), (r"^_orig_mod\.", ""), (r"^(?:module\.)+", ""),
    (r"^model\.", "backbone."), (r"\.norm\.(\d)", r".norm\1"), (r"norm(\d)\.", r"norm.\1."),
    (r"LayerNorm\.gamma$", "LayerNorm.weight"), (r"LayerNorm\.beta$", "LayerNorm.bias"),
    (r"(\w+)\.weight_g$", r"\1.parametrizations.weight.original0"), (r"^(.*)\.(\d+)\.(.*)$", r"\3.\2.\1"),
    (r"layer\.(\d+)\.", r"layers.\g<1>."), (r"[aeiou]", "_"), (r"[^a-z.]+", "#"), (r"\d+", "<n>"),
    (r"x*", "-"), (r"", "-"), (r"a|b|c", "Z"), (r"(a|ab)(c|bcd)(d*)", r"[\1|\2|\3]"), (r"a{2,3}", "Y"),
    (r"a{3}", "Y"), (r"a{2,}?", "Y"), (r"a+?", "Y"), (r"a*?", "Y"), (r"(a*)*c", r"<\1>"), (r"(a|aa)*c", "C"),
    (r"\.$", ""), (r"^", "pre."), (r"$", ".post"), (r"\s", "_"), (r"[\d.]+", "#"), (r"[-a]", "+"),
    (r"(?:\.\w+){2}$", ""), (r"\t", " "), (r"(.)\1", "X"), (r"(?=a)", "X"), (r"(?P<n>a)", "X"), (r"a**", "X"),
    (r"(", "X"), (r")", "X"), (r"[a-", "X"), (r"*a", "X"), (r"a{5,2}", "X"), (r"\q", "X"), (r"a", r"\2"),
    (r"(a)", r"\g<1>\1\\"), (r"a", r"\."), (r"a", r"\n"),
]


def python(pattern, repl, key):
    """('sub', result) and ('search', spans) as Python's re gives them, or ('error', ...)."""
    try:
        compiled = re.compile(pattern)
        result = compiled.sub(repl, key)
    except (re.error, IndexError) as e:
        return ("error", str(e)), None
    m = compiled.search(key)
    spans = "none" if m is None else " ".join(
        str(x) for i in range(compiled.groups + 1) for x in (m.span(i) if m.span(i) != (-1, -1) else (-1, -1)))
    return ("sub", result), spans


def escape(s):
    return s.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")


def unescape(s):
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\" and i + 1 < len(s):
            c = s[i + 1]
            out.append("\t" if c == "t" else "\n" if c == "n" else c)
            i += 2
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def ckptfix(triples):
    data = "".join(f"{escape(p)}\t{escape(r)}\t{escape(k)}\n" for p, r, k in triples)
    out = subprocess.run([TOOL], input=data, capture_output=True, text=True, check=True).stdout.splitlines()
    results = []
    for i in range(0, len(out), 2):
        kind, _, value = out[i].partition("\t")
        spans = out[i + 1].partition("\t")[2]
        results.append(((kind, unescape(value)), spans))
    return results


# What ckptfix documents it leaves out of Python's syntax: refused, where re accepts.
UNSUPPORTED = re.compile(r"\(\?[=!<P]|\\[1-9]|\\[AbBZ]")


class KeyRegexTest(unittest.TestCase):
    def check(self, triples):
        ours = ckptfix(triples)
        self.assertEqual(len(ours), len(triples))
        compared = 0
        for (pattern, repl, key), (result, spans) in zip(triples, ours):
            theirs, their_spans = python(pattern, repl, key)
            what = f"re.sub({pattern!r}, {repl!r}, {key!r})"
            documented = UNSUPPORTED.search(pattern) or re.compile(pattern).groups > 9 if theirs[0] != "error" else False
            if theirs[0] == "error" or (documented and result[0] == "error"):
                self.assertEqual(result[0], "error", f"{what}: Python refuses it ({theirs[1]}), ckptfix gave {result}")
                continue
            self.assertEqual(result, theirs, what)
            self.assertEqual(spans, their_spans, f"re.search({pattern!r}, {key!r}): match and groups")
            compared += 1
        return compared

    def test_cases(self):
        n = self.check([(p, r, k) for p, r in CASES for k in KEYS])
        self.assertGreater(n, 400)

    def test_random_patterns(self):
        rng = random.Random(51)
        atoms = ["a", "b", ".", "[ab]", "[^a.]", r"\d", r"\w", r"\.", "1", "(a|b)", "(?:ab|a)", "(a*)", "(b|)", "^",
                 "$", "(a(b)?)", "((a|)b*)", "[a-b1]", "(?:)", "()"]
        quants = ["", "", "*", "+", "?", "{2}", "{1,3}", "{0,2}", "{2,}", "*?", "+?", "??", "{1,2}?"]
        triples = []
        for _ in range(6000):
            pattern = "".join(rng.choice(atoms) + rng.choice(quants) for _ in range(rng.randint(1, 6)))
            if rng.random() < 0.3:
                pattern = "(" + pattern + ")" + rng.choice(quants)
            if rng.random() < 0.2:
                pattern += "|" + rng.choice(atoms)
            key = "".join(rng.choice("ab1.") for _ in range(rng.randint(0, 14)))
            triples.append((pattern, rng.choice(["X", r"<\g<0>>", "", r"\1"]), key))
        self.assertGreater(self.check(triples), 4000)

    def test_pathological_patterns_take_linear_time(self):
        """Each of these takes a backtracking engine (Python's re included) exponential time on a key of
        a few dozen bytes; ckptfix's is linear in the key. Judged by the ratio of two key lengths, not a
        wall-clock bound, so that a sanitizer build (several times slower) is judged alike: 4x the key,
        at most 8x the time (a quadratic engine takes 16x)."""
        patterns = (r"(a*)*b", r"(a|aa)*b", r"(a+)+b", r"(.*a){20}b", r"(a?){30}a{30}b")

        def seconds(length):
            key = "a" * length + "!"
            start = time.perf_counter()
            results = ckptfix([(p, "X", key) for p in patterns])
            elapsed = time.perf_counter() - start
            self.assertTrue(all(r[0] == ("sub", key) for r in results), results)
            return elapsed

        short, long = seconds(10000), seconds(40000)
        self.assertLess(long, 8 * short + 1.0, f"{short:.2f} s for 10 KB keys, {long:.2f} s for 40 KB keys")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--tool", required=True)
    args, rest = parser.parse_known_args()
    TOOL = args.tool
    unittest.main(argv=[sys.argv[0]] + rest)
