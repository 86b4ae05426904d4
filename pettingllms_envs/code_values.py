"""Plain values as JSON, both ways: how a returned value leaves the sandbox as data.

The function-problem judge (:mod:`pettingllms_envs.code_judge`) never lets the program say
whether a test passed. The program's process only reports what the function *returned*, in
this encoding, and the verdict is computed elsewhere: on the host for call tests, in a
separate sandboxed judge that runs no submitted code for script tests (the arguments of each
call travel to the submission in this encoding too). Decoding is plain JSON plus a
walk over tags (no ``eval``), so whatever bytes the program writes can at worst be read as
some plain value it could have returned honestly.

Only built-in values travel: ``None``, ``bool``, ``int``, ``float``, ``complex``, ``str``,
``bytes`` and ``list``/``tuple``/``dict``/``set``/``frozenset`` of them, nested at most
:data:`MAX_DEPTH` deep. Anything else (an object with a custom ``__eq__``, a generator, a
subclass of ``int``) is refused by :func:`encode` with ``TypeError``.

This file is also embedded, as source text, into the programs that run in the sandbox
(``CODEC_SOURCE``), so the host and the sandbox share one implementation. It must therefore
import nothing but the standard library and define nothing at import time but functions and
constants.
"""

MAX_DEPTH = 64


def encode(value, depth=0):
    """``value`` as a JSON-ready tagged tree. Raises ``TypeError`` for non-plain values."""
    kind = type(value)
    if depth > MAX_DEPTH:
        raise TypeError("value nested too deeply")
    if value is None or kind is bool:
        return value
    if kind is int:
        return {"i": format(value, "x")}
    if kind is float:
        return {"f": value.hex()}
    if kind is complex:
        return {"c": [value.real.hex(), value.imag.hex()]}
    if kind is str:
        return {"s": value}
    if kind is bytes:
        return {"b": value.hex()}
    if kind in (list, tuple, set, frozenset):
        tag = {list: "l", tuple: "t", set: "set", frozenset: "fs"}[kind]
        return {tag: [encode(item, depth + 1) for item in value]}
    if kind is dict:
        return {"d": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    raise TypeError("returned a " + kind.__name__)


def decode(tree, depth=0):
    """The value a tagged tree stands for. Raises ``ValueError`` on anything malformed."""
    if depth > MAX_DEPTH + 1:
        raise ValueError("value nested too deeply")
    if tree is None or tree is True or tree is False:
        return tree
    if type(tree) is not dict or len(tree) != 1:
        raise ValueError("not an encoded value")
    ((tag, body),) = tree.items()
    try:
        if tag == "i" and type(body) is str and len(body) <= 4096:
            return int(body, 16)
        if tag == "f" and type(body) is str:
            return float.fromhex(body)
        if tag == "c" and type(body) is list and len(body) == 2:
            return complex(float.fromhex(body[0]), float.fromhex(body[1]))
        if tag == "s" and type(body) is str:
            return body
        if tag == "b" and type(body) is str:
            return bytes.fromhex(body)
        if tag in ("l", "t", "set", "fs") and type(body) is list:
            items = [decode(item, depth + 1) for item in body]
            return {"l": list, "t": tuple, "set": set, "fs": frozenset}[tag](items)
        if tag == "d" and type(body) is list:
            pairs = []
            for pair in body:
                if type(pair) is not list or len(pair) != 2:
                    raise ValueError("bad dict entry")
                pairs.append((decode(pair[0], depth + 1), decode(pair[1], depth + 1)))
            return dict(pairs)
    except (TypeError, ValueError, OverflowError, AttributeError) as exc:
        raise ValueError("malformed encoded value: " + type(exc).__name__) from None
    raise ValueError("unknown value tag")
