"""A generated offline set of easy stdin/stdout coding problems for ``code_v0``.

Why: HumanEval is far beyond a ~100M-parameter model, so CPU smoke runs need problems such a
model can sometimes solve (read two integers and print their sum, reverse a word, ...). Each
template draws its parameters and hidden test inputs from a seeded RNG and computes the expected
outputs with a trusted Python function; the reference solution is program text, run only in the
sandbox like any other.
"""

from __future__ import annotations

import math
import operator
from typing import Callable

import numpy as np

from pettingllms_envs.code_problem import CodeProblem, TestCase

Template = Callable[[np.random.Generator], tuple[str, str, list[str], Callable[[str], str]]]


def _ints(rng: np.random.Generator, count: int, low: int, high: int) -> list[int]:
    return [int(v) for v in rng.integers(low, high + 1, size=count)]


def _word(rng: np.random.Generator, low: int = 1, high: int = 12,
          alphabet: str = "abcdefghijklmnopqrstuvwxyz") -> str:
    size = int(rng.integers(low, high + 1))
    return "".join(alphabet[i] for i in rng.integers(0, len(alphabet), size=size))


def _list_input(rng: np.random.Generator, low: int = -100, high: int = 100) -> str:
    values = _ints(rng, int(rng.integers(1, 9)), low, high)
    return f"{len(values)}\n{' '.join(map(str, values))}\n"


def _list_of(text: str) -> list[int]:
    return [int(v) for v in text.split("\n")[1].split()]


def _arithmetic(rng):
    symbol, words = [("+", "the sum a + b"), ("-", "the difference a - b"),
                     ("*", "the product a * b")][int(rng.integers(0, 3))]
    apply = {"+": operator.add, "-": operator.sub, "*": operator.mul}[symbol]
    inputs = [f"{a} {b}\n" for a, b in zip(_ints(rng, 6, -1000, 1000), _ints(rng, 6, -1000, 1000))]
    return (f"Read two integers a and b from one line, separated by a space, and print {words}.",
            f"a, b = map(int, input().split())\nprint(a {symbol} b)\n", inputs,
            lambda s: str(apply(*map(int, s.split()))))


def _reverse(rng):
    inputs = [_word(rng) + "\n" for _ in range(6)]
    return ("Read one word and print it reversed.", "print(input().strip()[::-1])\n",
            inputs, lambda s: s.strip()[::-1])


def _extreme(rng):
    name, pick = [("largest", max), ("smallest", min)][int(rng.integers(0, 2))]
    return (f"The first line holds n, the second line n integers separated by spaces. Print the "
            f"{name} of them.",
            f"input()\nprint({pick.__name__}(map(int, input().split())))\n",
            [_list_input(rng) for _ in range(6)], lambda s: str(pick(_list_of(s))))


def _vowels(rng):
    return ("Read a word of lowercase letters and print how many vowels (a, e, i, o, u) it has.",
            "print(sum(c in 'aeiou' for c in input().strip()))\n",
            [_word(rng) + "\n" for _ in range(6)],
            lambda s: str(sum(c in "aeiou" for c in s.strip())))


def _multiples_sum(rng):
    k = int(rng.integers(2, 6))
    return (f"The first line holds n, the second line n integers separated by spaces. Print the "
            f"sum of those that are multiples of {k} (0 if there are none).",
            f"input()\nprint(sum(x for x in map(int, input().split()) if x % {k} == 0))\n",
            [_list_input(rng) for _ in range(6)],
            lambda s: str(sum(x for x in _list_of(s) if x % k == 0)))


def _case(rng):
    name, method = [("upper", "upper"), ("lower", "lower")][int(rng.integers(0, 2))]
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    return (f"Read one word and print it in {name} case.", f"print(input().strip().{method}())\n",
            [_word(rng, alphabet=letters) + "\n" for _ in range(6)],
            lambda s: getattr(s.strip(), method)())


def _fizz(rng):
    k, word = int(rng.integers(2, 8)), ["Fizz", "Buzz", "Bang"][int(rng.integers(0, 3))]
    return (f"Read n and print the numbers 1 to n, one per line, but print {word} instead of "
            f"every multiple of {k}.",
            f"for i in range(1, int(input()) + 1):\n    print('{word}' if i % {k} == 0 else i)\n",
            [f"{n}\n" for n in _ints(rng, 6, 1, 20)],
            lambda s: "\n".join(word if i % k == 0 else str(i) for i in range(1, int(s) + 1)))


def _factorial(rng):
    return ("Read n (0 <= n <= 15) and print n! (the product 1 * 2 * ... * n; 0! is 1).",
            "import math\nprint(math.factorial(int(input())))\n",
            [f"{n}\n" for n in _ints(rng, 6, 0, 15)],
            lambda s: str(math.factorial(int(s))))


def _palindrome(rng):
    inputs = []
    for _ in range(6):
        half = _word(rng, 1, 6, "abc")
        inputs.append((half + half[::-1][int(rng.integers(0, 2)):] if rng.random() < 0.5
                       else _word(rng, 2, 8, "abc")) + "\n")
    return ("Read one word and print YES if it reads the same backwards, otherwise NO.",
            "w = input().strip()\nprint('YES' if w == w[::-1] else 'NO')\n", inputs,
            lambda s: "YES" if s.strip() == s.strip()[::-1] else "NO")


def _count_words(rng):
    inputs = [" ".join(_word(rng, 1, 6) for _ in range(int(rng.integers(1, 8)))) + "\n"
              for _ in range(6)]
    return ("Read one line of words separated by single spaces and print how many words it has.",
            "print(len(input().split()))\n", inputs, lambda s: str(len(s.split())))


def _sort(rng):
    name, reverse = [("ascending", False), ("descending", True)][int(rng.integers(0, 2))]
    return (f"The first line holds n, the second line n integers separated by spaces. Print them "
            f"sorted in {name} order on one line, separated by spaces.",
            "input()\nprint(*sorted(map(int, input().split()), reverse=%r))\n" % reverse,
            [_list_input(rng) for _ in range(6)],
            lambda s: " ".join(map(str, sorted(_list_of(s), reverse=reverse))))


def _triangle(rng):
    return ("Read n (1 <= n <= 100000) and print 1 + 2 + ... + n.",
            "n = int(input())\nprint(n * (n + 1) // 2)\n",
            [f"{n}\n" for n in _ints(rng, 6, 1, 100_000)],
            lambda s: str(int(s) * (int(s) + 1) // 2))


def _digit_sum(rng):
    return ("Read a non-negative integer and print the sum of its digits.",
            "print(sum(int(c) for c in input().strip()))\n",
            [f"{n}\n" for n in _ints(rng, 6, 0, 10 ** 9)],
            lambda s: str(sum(int(c) for c in s.strip())))


def _times_table(rng):
    k = int(rng.integers(2, 6))
    return (f"Read n and print n * 1, n * 2, ..., n * {k}, one per line.",
            f"n = int(input())\nfor i in range(1, {k + 1}):\n    print(n * i)\n",
            [f"{n}\n" for n in _ints(rng, 6, -50, 50)],
            lambda s: "\n".join(str(int(s) * i) for i in range(1, k + 1)))


#: The easy stdio templates of the generated set: name -> builder(rng) returning
#: (statement, reference program, test inputs, expected-output function).
TEMPLATES: dict[str, Template] = {
    "arithmetic": _arithmetic, "reverse": _reverse, "extreme": _extreme, "vowels": _vowels,
    "multiples_sum": _multiples_sum, "case": _case, "fizz": _fizz, "factorial": _factorial,
    "palindrome": _palindrome, "count_words": _count_words, "sort": _sort,
    "triangle": _triangle, "digit_sum": _digit_sum, "times_table": _times_table,
}


def generate_problems(count: int, seed: int = 0) -> tuple[CodeProblem, ...]:
    """``count`` easy stdio problems cycling through :data:`TEMPLATES`, with parameters and 6
    hidden tests each drawn from ``np.random.default_rng(seed)``; ids are
    ``generated/<index>-<template>``. A prefix of a longer list equals the shorter list."""
    rng = np.random.default_rng(seed)
    names = list(TEMPLATES)
    problems = []
    for index in range(count):
        name = names[index % len(names)]
        statement, reference, inputs, solve = TEMPLATES[name](rng)
        problems.append(CodeProblem(
            id=f"generated/{index}-{name}", prompt=statement, kind="stdio",
            tests=tuple(TestCase(text, solve(text) + "\n") for text in inputs),
            reference=reference, source="generated"))
    return tuple(problems)


