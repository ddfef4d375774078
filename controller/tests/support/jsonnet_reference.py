"""Evaluates Jsonnet hook cases with the reference implementation (the C++ Jsonnet of the Python
package `jsonnet`), as Metacontroller's jsonnetd calls a hook: the request as top-level code
argument `request`, imports from the case's own files only, jsonnetd's native functions.

stdin: a JSON list of {"main": name, "files": {name: text}, "request": json text}.
stdout: a JSON list of {"ok": output} or {"error": message}, one per case.
Exit code 3 when the `jsonnet` package is not installed.
"""
import json
import sys

try:
    import _jsonnet
except ImportError:
    sys.exit(3)


def json_unmarshal(s):
    value = json.loads(s)
    if not isinstance(value, dict):
        raise ValueError("can't unmarshal JSON: not an object")
    return value


def parse_int(s, base):
    return float(int(s, int(base)))


NATIVES = {
    "jsonUnmarshal": (("jsonStr",), json_unmarshal),
    "parseInt": (("intStr", "base"), parse_int),
}


def evaluate(case):
    files = case["files"]

    def imports(_dir, rel):
        name = rel[2:] if rel.startswith("./") else rel
        if name not in files:
            raise RuntimeError("no file %r among the program's sources" % rel)
        return name, files[name].encode()

    try:
        out = _jsonnet.evaluate_snippet(
            case["main"],
            files[case["main"]],
            tla_codes={"request": case["request"]},
            import_callback=imports,
            native_callbacks=NATIVES,
        )
        return {"ok": out}
    except RuntimeError as e:
        return {"error": str(e)}


print(json.dumps([evaluate(c) for c in json.load(sys.stdin)]))
