#!/usr/bin/env python3
"""Differential suite: pav-templates against Jinja2 configured as PaV did.

Every case is one template evaluated as one field of a PavProvisioner, with
the context of benches/fixtures/differential/context.yaml. The cases are the
families written in benches/fixtures/differential/*.yaml (one mapping of
case name to template per file) and the families generated below (the
operator x type matrix, the sandbox-callable methods of str, dict, list,
int and float, and `yaml = true` with a value of every type).

pav renders them through `render-cases` (pav-templates/examples), Jinja2
through PaV's environment (benches/jinja2_pav.py: sandboxed, trim_blocks,
lstrip_blocks, its finalize and `tobash`, `yaml` read from the template's
module). A case agrees when both outputs are equal (same JSON types) or
both fail with the same kind of failure (syntax, undefined, yaml or
evaluation: render-cases names pav's, `python_kind` Jinja2's).

Disagreements must be listed: known-differences.txt (to be fixed) or
deliberate.yaml (differences pav makes on purpose, each also in
docs/templates.md, each case with pav's recorded answer, which must not
change). The suite fails on an unlisted difference and on a
listed case that agrees (the lists can only shrink honestly).

Usage: differential.py RENDER_CASES_BINARY [--show NAME...] [--list]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import jinja2_pav  # noqa: E402  (installs jinja2 and pyyaml when missing)

import jinja2  # noqa: E402
import yaml  # noqa: E402
from jinja2.defaults import DEFAULT_NAMESPACE  # noqa: E402

HERE = Path(__file__).resolve().parent / "fixtures" / "differential"
CONTEXT = yaml.safe_load((HERE / "context.yaml").read_text())

# ---------------------------------------------------------------------------
# Generated families

# A value of each type a template meets, as an expression. `u` is undefined.
OPERANDS = {
    "undefined": "u",
    "none": "none",
    "bool": "true",
    "int": "7",
    "float": "2.5",
    "str": "'ab'",
    "list": "[1, 2]",
    "dict": "{'a': 1}",
}
BINARY = ["+", "-", "*", "/", "//", "%", "**", "~", "==", "!=", "<", "<=", ">", ">=",
          "in", "not in", "and", "or"]
UNARY = ["-", "+", "not "]

# Prints any value with its type visible, so `1`, `1.0`, `'1'` and `True`
# differ, without relying on how a boolean or a list is output.
SHOW = ("{% set r = EXPR %}{% if r is undefined %}Undefined{% elif r is sameas true %}True"
        "{% elif r is sameas false %}False{% elif r is none %}None"
        "{% elif r is string %}'{{ r }}'{% elif r is number %}{{ r }}"
        "{% elif r is mapping %}{{ r | tojson }}{% else %}{{ r | list | tojson }}{% endif %}")


def show(expression: str) -> str:
    return SHOW.replace("EXPR", expression)


def operator_cases() -> dict[str, str]:
    cases = {}
    for op in BINARY:
        for left_type, left in OPERANDS.items():
            for right_type, right in OPERANDS.items():
                cases[f"op {left_type} {op} {right_type}"] = show(f"({left}) {op} ({right})")
    for op in UNARY:
        for operand_type, operand in OPERANDS.items():
            cases[f"op {op.strip()} {operand_type}"] = show(f"{op}({operand})")
    return cases


# Arguments tried for every method Jinja2's sandbox lets a template call
# (ImmutableSandboxedEnvironment: no method that changes a list or a dict).
# The suite fails if a callable method is missing here.
METHODS = {
    "str": ("'Hello World-x'", {
        "capitalize": ["()"], "casefold": ["()"], "center": ["(20)", "(20, '*')"],
        "count": ["('l')", "('l', 3)"], "encode": ["() | length"],
        "endswith": ["('x')", "(('x', 'y'))"], "expandtabs": ["()"],
        "find": ["('o')", "('z')"], "format": ["()"], "format_map": ["({})"],
        "index": ["('o')", "('z')"], "isalnum": ["()"], "isalpha": ["()"],
        "isascii": ["()"], "isdecimal": ["()"], "isdigit": ["()"],
        "isidentifier": ["()"], "islower": ["()"], "isnumeric": ["()"],
        "isprintable": ["()"], "isspace": ["()"], "istitle": ["()"], "isupper": ["()"],
        "join": ["(['a', 'b'])"], "ljust": ["(20, '.')"], "lower": ["()"],
        "lstrip": ["()", "('Hel')"], "maketrans": ["('a', 'b') | length"],
        "partition": ["(' ')", "('#')"], "removeprefix": ["('Hello ')"],
        "removesuffix": ["('-x')"], "replace": ["('l', 'L')", "('l', 'L', 1)"],
        "rfind": ["('o')"], "rindex": ["('o')"], "rjust": ["(20)"],
        "rpartition": ["('o')"], "rsplit": ["()", "('-')", "('o', 1)"],
        "rstrip": ["('x')"], "split": ["()", "('o')", "('o', 1)", "(none, 1)"],
        "splitlines": ["()"], "startswith": ["('Hell')", "(('a', 'H'))"],
        "strip": ["('Hx')"], "swapcase": ["()"], "title": ["()"],
        "translate": ["({72: 104})"], "upper": ["()"], "zfill": ["(20)"],
    }),
    "dict": ("{'b': 1, 'a': 2}", {
        "copy": ["()"], "fromkeys": ["(['x', 'y'])", "(['x'], 0)"],
        "get": ["('a')", "('z')", "('z', 5)"], "items": ["()"], "keys": ["()"],
        "values": ["()"],
    }),
    "list": ("[3, 1, 3]", {"copy": ["()"], "count": ["(3)"], "index": ["(1)", "(9)"]}),
    "int": ("(12)", {
        "as_integer_ratio": ["()"], "bit_count": ["()"], "bit_length": ["()"],
        "conjugate": ["()"], "from_bytes": ["([1, 0], 'big')"],
        "to_bytes": ["(2, 'big') | list"], "denominator": [""], "numerator": [""],
        "real": [""], "imag": [""],
    }),
    "float": ("(2.5)", {
        "as_integer_ratio": ["()"], "conjugate": ["()"], "fromhex": ["('0x1p-2')"],
        "hex": ["()"], "is_integer": ["()"], "real": [""], "imag": [""],
    }),
}


def method_cases(env) -> dict[str, str]:
    cases = {}
    for type_name, (receiver, methods) in METHODS.items():
        value = env.from_string("{% set v = " + receiver + " %}").module.v
        missing = [name for name in dir(value)
                   if not name.startswith("_") and env.is_safe_attribute(value, name, getattr(value, name))
                   and name not in methods]
        if missing:
            sys.exit(f"differential.py: no case for {type_name} methods {missing}")
        for name, calls in methods.items():
            for call in calls:
                cases[f"method {type_name}.{name}{call}"] = show(f"{receiver}.{name}{call}")
    return cases


# `{% set yaml = true %}` with output of every type, and `yaml` set to values
# that are not booleans.
YAML_CASES = {
    "int": "{{ 42 }}", "negative": "{{ -7 }}", "float": "{{ 2.5 }}", "big": "{{ 2**70 }}",
    "string": "{{ 'abc' }}", "quoted": "'{{ 42 }}'", "empty": "", "null": "null",
    "tilde": "~", "bool": "true", "yes": "yes", "list": "[1, a, 2.5]",
    "dict": "{a: 1, b: [x]}", "block": "a: 1\nb:\n  - 2\n  - c: d\n",
    "tojson": "{{ {'k': [1, 'v']} | tojson }}", "multi-line": "- 1\n- 2\n",
    "exponent": "1e3", "octal": "0o17", "hex": "0x1F", "date": "2024-01-02",
    "inf": ".inf", "invalid": "[1, 2",
}
YAML_SETTINGS = {
    "true": "true", "false": "false", "none": "none", "undefined": "u", "one": "1",
    "string": "'true'", "zero": "0",
}


def yaml_cases() -> dict[str, str]:
    cases = {f"yaml {name}": "{% set yaml = true %}" + body for name, body in YAML_CASES.items()}
    for name, setting in YAML_SETTINGS.items():
        cases[f"yaml = {name}"] = "{% set yaml = " + setting + " %}[1]"
    return cases


# ---------------------------------------------------------------------------


def load_cases(env) -> dict[str, str]:
    cases: dict[str, str] = {}

    def add(new: dict[str, str], origin: str) -> None:
        for name, template in new.items():
            if name in cases:
                sys.exit(f"differential.py: case {name!r} defined twice ({origin})")
            cases[name] = template

    for path in sorted(HERE.glob("*.yaml")):
        if path.name in ("context.yaml", "deliberate.yaml"):
            continue
        family = path.stem
        add({f"{family} {name}": str(template)
             for name, template in yaml.safe_load(path.read_text()).items()}, path.name)
    add(operator_cases(), "operators")
    add(method_cases(env), "methods")
    add(yaml_cases(), "yaml")
    return cases


def check_coverage(cases: dict[str, str]) -> None:
    """Every builtin filter, test and global appears in some case."""
    import re
    text = "\n".join(cases.values())
    env = jinja2_pav.create_env({})
    missing = [f"filter {name}" for name in env.filters
               if not re.search(r"\|\s*" + re.escape(name) + r"\b", text)]
    missing += [f"test {name}" for name in env.tests
                if not re.search(r"\bis\s+(not\s+)?" + re.escape(name) + r"(\W|$)", text)]
    missing += [f"global {name}" for name in DEFAULT_NAMESPACE
                if not re.search(r"\b" + re.escape(name) + r"\s*\(", text)]
    if missing:
        sys.exit(f"differential.py: no case uses {', '.join(missing)}")


def run_jinja2(template: str) -> dict:
    try:
        return {"output": jinja2_pav.evaluate_as_pav(template, CONTEXT)}
    except Exception as e:  # noqa: BLE001 - any failure is an outcome
        return {"error": f"{type(e).__name__}: {e}"}


def normal(value: object) -> object:
    """A JSON-comparable form, booleans, integers and floats kept apart."""
    return json.loads(json.dumps(value, default=str))


def same_json(a: object, b: object) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b))
    return a == b


# Jinja2's exceptions by the kind of failure render-cases reports for pav.
SYNTAX_ERRORS = {"TemplateSyntaxError", "TemplateAssertionError"}
YAML_ERRORS = {"ParserError", "ScannerError", "ComposerError", "ConstructorError"}


def python_kind(error: str) -> str:
    """The kind (render-cases' word) of a Jinja2 failure `Class: message`."""
    name, _, message = error.partition(":")
    if name in SYNTAX_ERRORS:
        return "syntax"
    # Jinja2 raises TypeError when an Undefined reaches json.dumps and the like.
    if name == "UndefinedError" or (name == "TypeError" and "Undefined" in message):
        return "undefined"
    if name in YAML_ERRORS:
        return "yaml"
    return "evaluation"


def agree(pav: dict, python: dict) -> bool:
    """Equal outputs (same JSON types), or failures of the same kind."""
    if "error" in pav or "error" in python:
        return ("error" in pav and "error" in python
                and pav["kind"] == python_kind(python["error"]))
    return same_json(pav["output"], normal(python["output"]))


def as_recorded(pav: dict, recorded: dict) -> bool:
    """Whether pav's result is the one deliberate.yaml records for it: the
    same output, or a failure of the same kind."""
    if "error" in recorded:
        return pav.get("kind") == recorded["error"]
    return "output" in pav and same_json(pav["output"], normal(recorded["output"]))


def read_known() -> list[str]:
    lines = (HERE / "known-differences.txt").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("render_cases", help="the render-cases binary")
    parser.add_argument("--show", nargs="*", default=[], help="print these cases in full")
    parser.add_argument("--list", action="store_true", help="print every differing case name")
    args = parser.parse_args()

    env = jinja2_pav.create_env({})
    cases = load_cases(env)
    check_coverage(cases)
    names = list(cases)
    request = {"context": CONTEXT, "cases": [{"template": cases[n]} for n in names]}
    done = subprocess.run([args.render_cases], input=json.dumps(request), text=True,
                          capture_output=True, check=True)
    pav_results = dict(zip(names, json.loads(done.stdout)))

    known = read_known()
    groups = yaml.safe_load((HERE / "deliberate.yaml").read_text()) or {}
    # Each deliberate case records what pav answers: {output: VALUE} or
    # {error: KIND}, so it cannot change to another wrong answer unnoticed.
    recorded = {name: outcome for group in groups.values()
                for name, outcome in group["cases"].items()}
    deliberate = list(recorded)
    problems = []
    for name in known + deliberate:
        if name not in cases:
            problems.append(f"listed case {name!r} does not exist")
    if len(set(known) | set(deliberate)) != len(known) + len(deliberate):
        problems.append("a case is listed twice")

    differing = []
    for name in names:
        python = run_jinja2(cases[name])
        pav = pav_results[name]
        ok = agree(pav, python)
        detail = (f"{name}: {json.dumps(cases[name])}\n"
                  f"      pav:    {json.dumps(pav, ensure_ascii=False)}\n"
                  f"      jinja2: {json.dumps(normal(python), ensure_ascii=False)}")
        if name in args.show:
            print(detail)
        if name in recorded and not as_recorded(pav, recorded[name]):
            problems.append(f"deliberate case {name!r} no longer answers what deliberate.yaml "
                            f"records ({json.dumps(recorded[name])}): " + detail)
        if not ok:
            differing.append(name)
            if name not in known and name not in deliberate:
                problems.append("unlisted difference " + detail)
        elif name in known or name in deliberate:
            problems.append(f"listed case {name!r} no longer differs: remove it from the list")
    if args.list:
        print("\n".join(differing))
    print(f"differential suite: {len(cases)} cases; {len(cases) - len(differing)} agree, "
          f"{len(differing)} differ ({len(known)} known, to fix; {len(deliberate)} deliberate)")
    if problems:
        print("\n".join("  " + p for p in problems), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
