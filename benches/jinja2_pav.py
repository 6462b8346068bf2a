#!/usr/bin/env python3
"""The original PaV's templating on Jinja2, timed against pav-templates.

Reads the JSON document printed by `render-timing` (every case's context
files, pav's rendered output and pav's timings), rebuilds each context from
the same YAML files the way PaV's `Provisioner` did, evaluates the same phase
with Jinja2, fails loudly if any output differs from pav's, and prints a
table of microseconds per evaluation.

Jinja2 variants timed:

- "as PaV": PaV's `evaluate_templates` (image/pav/shared/templating.py),
  synchronous: a new `ImmutableSandboxedEnvironment` per phase evaluation,
  with the context as globals, and for every string field
  `env.from_string(field)`, `.render()`, and `.make_module().yaml`. No
  template is ever cached.
- "PaV async": the same, verbatim as PaV ran it: `enable_async=True`,
  `render_async()` and `make_module_async()` on one event loop.
- "cached": the fair best case for Jinja2: one environment, every template
  compiled once, each field evaluated once per phase (`make_module(context)`
  gives both the output and `yaml`).

Usage: jinja2_pav.py RUST_JSON [--sample-ms N] [--samples N] [--no-timing]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import subprocess
import sys
import time
from decimal import Decimal, ROUND_HALF_EVEN
from pathlib import Path


def ensure_modules() -> None:
    """Installs jinja2 and pyyaml with pip if they are missing."""
    missing = []
    for module, package in (("jinja2", "jinja2"), ("yaml", "pyyaml")):
        try:
            __import__(module)
        except ImportError:
            missing.append(package)
    if missing:
        print(f"installing {' '.join(missing)} with pip", file=sys.stderr)
        base = [sys.executable, "-m", "pip", "install", "--quiet", *missing]
        if subprocess.run(base + ["--user"]).returncode != 0:
            subprocess.run(base + ["--break-system-packages"], check=True)


ensure_modules()

import jinja2  # noqa: E402
import yaml  # noqa: E402
from jinja2 import Undefined, UndefinedError  # noqa: E402
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402

WORKSPACE = Path(__file__).resolve().parent.parent

# ---------------------------------------------------------------------------
# PaV's environment (image/pav/shared/templating.py, _create_env)


def finalize(value: object) -> object:
    if isinstance(value, Undefined):
        raise UndefinedError("Expressions must not evaluate to undefined")
    if not isinstance(value, (str, int, float)):
        raise TypeError("Expressions must evaluate to a string or numeric value")
    return str(value)


def tobash(value: object) -> str:
    if isinstance(value, Undefined):
        raise UndefinedError("Filter 'tobash' may not be applied to undefined")
    if not isinstance(value, (str, int, float)):
        raise TypeError("Filter 'tobash' expects a string or numeric value")
    value_str = str(value)
    if value_str:
        result = R"$'\n'".join(
            (shlex.quote(s) if s else "") for s in value_str.split("\n")
        )
        assert "\n" not in result
        return result
    return "''"


def create_env(context: dict, *, enable_async: bool = False):
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=finalize,
        enable_async=enable_async,
    )
    env.filters["tobash"] = tobash
    env.globals |= context
    return env


def check_yaml(is_yaml: object) -> bool:
    if not isinstance(is_yaml, bool):
        raise TypeError("`yaml` must be a boolean")
    return is_yaml


# ---------------------------------------------------------------------------
# Evaluation variants


def evaluate_as_pav(obj: object, context: dict) -> object:
    """PaV's evaluate_templates, synchronous; nothing cached."""
    env = create_env(context)

    def evaluate(o: object) -> object:
        if isinstance(o, dict):
            return {key: evaluate(value) for (key, value) in o.items()}
        if isinstance(o, (list, tuple)):
            return [evaluate(item) for item in o]
        if isinstance(o, str):
            template = env.from_string(o)
            new_o = template.render()
            if check_yaml(getattr(template.make_module(), "yaml", False)):
                new_o = yaml.safe_load(new_o)
            return new_o
        return o

    return evaluate(obj)


async def evaluate_as_pav_async(obj: object, context: dict) -> object:
    """PaV's evaluate_templates verbatim (async)."""
    env = create_env(context, enable_async=True)

    async def evaluate(o: object) -> object:
        if isinstance(o, dict):
            return {key: await evaluate(value) for (key, value) in o.items()}
        if isinstance(o, (list, tuple)):
            return [await evaluate(item) for item in o]
        if isinstance(o, str):
            template = env.from_string(o)
            new_o = await template.render_async()
            is_yaml = getattr(await template.make_module_async(), "yaml", False)
            if check_yaml(is_yaml):
                new_o = yaml.safe_load(new_o)
            return new_o
        return o

    return await evaluate(obj)


class Cached:
    """Every template compiled once; one evaluation per field per phase."""

    def __init__(self, obj: object):
        self.env = create_env({})
        self.tree = self.compile(obj)

    def compile(self, o: object) -> object:
        if isinstance(o, dict):
            return ("map", [(key, self.compile(value)) for (key, value) in o.items()])
        if isinstance(o, (list, tuple)):
            return ("list", [self.compile(item) for item in o])
        if isinstance(o, str):
            return ("template", self.env.from_string(o))
        return ("constant", o)

    def evaluate(self, context: dict) -> object:
        def evaluate(node):
            kind, payload = node
            if kind == "template":
                module = payload.make_module(context)
                new_o = str(module)
                if check_yaml(getattr(module, "yaml", False)):
                    new_o = yaml.safe_load(new_o)
                return new_o
            if kind == "map":
                return {key: evaluate(value) for (key, value) in payload}
            if kind == "list":
                return [evaluate(item) for item in payload]
            return payload

        return evaluate(self.tree)


# ---------------------------------------------------------------------------
# Contexts, as PaV's Provisioner built them (image/pav/shared/provisioner.py)


def parse_quantity(quantity: object) -> Decimal:
    """kubernetes.utils.parse_quantity."""
    if isinstance(quantity, (int, float, Decimal)):
        return Decimal(quantity)
    exponents = {"n": -3, "u": -2, "m": -1, "K": 1, "k": 1, "M": 2,
                 "G": 3, "T": 4, "P": 5, "E": 6}
    quantity = str(quantity)
    number, suffix = quantity, None
    if len(quantity) >= 2 and quantity[-1] == "i":
        if quantity[-2] in exponents:
            number, suffix = quantity[:-2], quantity[-2:]
    elif len(quantity) >= 1 and quantity[-1] in exponents:
        number, suffix = quantity[:-1], quantity[-1:]
    value = Decimal(number)
    if suffix is None:
        return value
    base = 1024 if suffix.endswith("i") else 1000
    return value * (base ** exponents[suffix[0]])


def parse_and_round_quantity(quantity: object) -> int:
    return int(parse_quantity(quantity).to_integral_value(rounding=ROUND_HALF_EVEN))


STRING_MAPS = {"annotations", "labels", "parameters", "volumeAttributes", "nodeSelector"}


def as_api_server_returns(o: object, key: str = "") -> object:
    """The API server is written in Go, whose JSON encoder writes map keys in
    sorted order: string maps (annotations, labels, parameters, ...) arrive
    sorted, whatever order a YAML file had them in."""
    if isinstance(o, dict):
        items = sorted(o.items()) if key in STRING_MAPS else o.items()
        return {k: as_api_server_returns(v, k) for k, v in items}
    if isinstance(o, list):
        return [as_api_server_returns(v) for v in o]
    return o


def load(relative: str) -> dict:
    return as_api_server_returns(yaml.safe_load((WORKSPACE / relative).read_text()))


def dynamic_context(pvc: dict, sc: dict) -> dict:
    spec = pvc["spec"]
    limits = spec["resources"].get("limits") or {}
    return {
        "requestedVolumeMode": spec["volumeMode"],
        "requestedAccessModes": list(spec["accessModes"]),
        "requestedMinCapacity": parse_and_round_quantity(spec["resources"]["requests"]["storage"]),
        "requestedMaxCapacity": (
            parse_and_round_quantity(limits["storage"]) if "storage" in limits else None
        ),
        "params": dict(sc.get("parameters") or {}),
        "sc": sc,
        "pvc": pvc,
    }


def build_context(spec: dict) -> dict:
    kind = spec["kind"]
    if kind == "dynamic":
        return dynamic_context(load(spec["pvc"]), load(spec["sc"]))
    if kind == "creation":
        pvc = load(spec["pvc"])
        return dynamic_context(pvc, load(spec["sc"])) | {
            "defaultHandle": f"pvc-{pvc['metadata']['uid']}"
        }
    if kind == "static":
        pv = load(spec["pv"])
        capacity = parse_and_round_quantity(pv["spec"]["capacity"]["storage"])
        return {
            "requestedVolumeMode": pv["spec"]["volumeMode"],
            "requestedAccessModes": list(pv["spec"]["accessModes"]),
            "requestedMinCapacity": capacity,
            "requestedMaxCapacity": capacity,
            "params": dict(pv["spec"]["csi"].get("volumeAttributes") or {}),
            "handle": pv["spec"]["csi"]["volumeHandle"],
            "pv": pv,
        }
    if kind == "staging":
        pvc, pv, node = load(spec["pvc"]), load(spec["pv"]), load(spec["node"])
        return {
            "volumeMode": pv["spec"]["volumeMode"],
            "accessModes": list(pvc["spec"]["accessModes"]),
            "capacity": parse_and_round_quantity(pv["spec"]["capacity"]["storage"]),
            "params": dict(pv["spec"]["csi"].get("volumeAttributes") or {}),
            "handle": pv["spec"]["csi"]["volumeHandle"],
            "readOnly": spec["readOnly"],
            "pvc": pvc,
            "pv": pv,
            "node": node,
        }
    raise ValueError(f"unknown context kind {kind!r}")


PHASE_FIELDS = {
    "validation": "volumeValidation",
    "creation": "volumeCreation",
    "deletion": "volumeDeletion",
    "staging": "volumeStaging",
    "unstaging": "volumeUnstaging",
}

# ---------------------------------------------------------------------------
# Timing


def measure(fn, sample_s: float, samples: int) -> float:
    """Seconds per call of `fn`, as `measure_batched`."""
    def run(n: int) -> None:
        for _ in range(n):
            fn()

    return measure_batched(run, sample_s, samples)


def measure_async(make_coro, sample_s: float, samples: int) -> float:
    """`measure` for a coroutine, every batch on one event loop."""
    async def batch(n: int) -> None:
        for _ in range(n):
            await make_coro()

    loop = asyncio.new_event_loop()
    try:
        return measure_batched(lambda n: loop.run_until_complete(batch(n)), sample_s, samples)
    finally:
        loop.close()


def measure_batched(run, sample_s: float, samples: int) -> float:
    """Fastest batch's seconds per call (the least disturbed by other load on
    a shared machine): `run(n)` makes n calls. Calibrates to 10 ms,
    then times `samples` batches of about `sample_s` seconds."""
    iterations = 1
    while True:
        start = time.perf_counter()
        run(iterations)
        elapsed = time.perf_counter() - start
        if elapsed >= 0.01:
            break
        iterations *= 2
    batch = max(1, int(sample_s / (elapsed / iterations)))
    results = []
    for _ in range(samples):
        start = time.perf_counter()
        run(batch)
        results.append((time.perf_counter() - start) / batch)
    return min(results)


def rust_ns(case: dict, what: str) -> float | None:
    for timing in case.get("timings") or []:
        if timing["what"] == what:
            return float(timing["min_ns"])
    return None


# ---------------------------------------------------------------------------


def diff(path: str, a: object, b: object, out: list[str]) -> None:
    """Collects the paths where `a` (pav) and `b` (Jinja2) differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                out.append(f"{path}.{key}: pav={a.get(key)!r} jinja2={b.get(key)!r}")
            else:
                diff(f"{path}.{key}", a[key], b[key], out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            diff(f"{path}[{i}]", x, y, out)
    elif a != b or type(a) is not type(b):
        out.append(f"{path}:\n      pav:    {json.dumps(a)}\n      jinja2: {json.dumps(b)}")


def check_probes(rust: dict) -> tuple[list[str], list[str]]:
    """Evaluates each semantics probe as PaV did; returns the unexpected
    differences and the deliberate ones."""
    context = build_context(rust["probe_context"])
    differences, deliberate = [], []
    for probe in rust.get("probes", []):
        try:
            python = {"output": evaluate_as_pav(probe["template"], context)}
        except Exception as e:  # noqa: BLE001 - any failure is an outcome
            python = {"error": f"{type(e).__name__}: {e}"}
        pav = {k: probe[k] for k in ("output", "error") if k in probe}
        same = (
            ("error" in pav and "error" in python)
            or ("output" in pav and "output" in python
                and pav["output"] == python["output"]
                and type(pav["output"]) is type(python["output"]))
        )
        if not same:
            text = (
                f"probe {probe['name']}: {json.dumps(probe['template'])}\n"
                f"      pav:    {json.dumps(pav, ensure_ascii=False)}\n"
                f"      jinja2: {json.dumps(python, ensure_ascii=False)}"
            )
            if probe.get("deliberate"):
                deliberate.append(text + f"\n      deliberate: {probe['deliberate']}")
            else:
                differences.append(text)
    return differences, deliberate


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("rust_json", help="output of render-timing")
    parser.add_argument("--sample-ms", type=float, default=40)
    parser.add_argument("--samples", type=int, default=9)
    parser.add_argument("--no-timing", action="store_true")
    args = parser.parse_args()
    sample_s = args.sample_ms / 1000

    rust = json.loads(Path(args.rust_json).read_text())
    provisioners: dict[str, dict] = {}
    mismatches: list[str] = []
    rows = []
    compile_rows = []
    for case in rust["cases"]:
        example, phase = case["example"], case["phase"]
        if example not in provisioners:
            source = (WORKSPACE / "examples" / example / "provisioner.yaml").read_text()
            provisioners[example] = yaml.safe_load(source)
            if not args.no_timing and case.get("compile"):
                env = create_env({})

                def compile_all(source=source, env=env):
                    # PaV's Provisioner.validate minus yamale: parse, compile every template
                    obj = yaml.safe_load(source)

                    def walk(o):
                        if isinstance(o, dict):
                            for v in o.values():
                                walk(v)
                        elif isinstance(o, list):
                            for v in o:
                                walk(v)
                        elif isinstance(o, str):
                            env.compile(o)

                    for key in obj["spec"].keys() - {"provisioningModes"}:
                        walk(obj["spec"][key])

                compile_rows.append(
                    (example, float(case["compile"]["min_ns"]) / 1000,
                     measure(compile_all, sample_s, args.samples) * 1e6)
                )
        obj = provisioners[example]["spec"].get(PHASE_FIELDS[phase], {})
        context = build_context(case["context"])
        cached = Cached(obj)

        outputs = {
            "as PaV": evaluate_as_pav(obj, context),
            "PaV async": asyncio.run(evaluate_as_pav_async(obj, context)),
            "cached": cached.evaluate(context),
        }
        for variant, output in outputs.items():
            found: list[str] = []
            diff(f"spec.{PHASE_FIELDS[phase]}", case["output"], output, found)
            if found:
                mismatches.append(
                    f"{example} {case['label']} (Jinja2 {variant}):\n    " + "\n    ".join(found)
                )
        status = "identical" if not any(m.startswith(f"{example} {case['label']} ") for m in mismatches) else "DIFFERENT"
        print(f"jinja2: {example} {case['label']}: output {status}", file=sys.stderr)

        if args.no_timing or not case["timed"]:
            continue
        as_pav = measure(lambda: evaluate_as_pav(obj, context), sample_s, args.samples)
        as_pav_async = measure_async(
            lambda: evaluate_as_pav_async(obj, context), sample_s, args.samples
        )
        cached_s = measure(lambda: cached.evaluate(context), sample_s, args.samples)
        rows.append((example, case["label"], rust_ns(case, "render"), rust_ns(case, "render_raw"),
                     rust_ns(case, "context"), as_pav * 1e9, as_pav_async * 1e9, cached_s * 1e9))

    if rows:
        print()
        print(f"Jinja2 {jinja2.__version__}, PyYAML {yaml.__version__}, "
              f"Python {sys.version.split()[0]}; µs per phase evaluation, fastest of "
              f"{args.samples} batches of ~{args.sample_ms:g} ms, both sides")
        print()
        print("| example | phase | pav | pav raw | pav context | Jinja2 as PaV | Jinja2 PaV async "
              "| Jinja2 cached | as PaV / pav | cached / pav | cached / pav raw |")
        print("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
        us = lambda ns: f"{ns / 1000:.2f}" if ns < 100_000 else f"{ns / 1000:.0f}"  # noqa: E731
        for example, label, render, raw, ctx, pav_ns, pav_async_ns, cached_ns in rows:
            print(f"| {example} | {label} | {us(render)} | {us(raw)} | {us(ctx)} | {us(pav_ns)} "
                  f"| {us(pav_async_ns)} | {us(cached_ns)} | {pav_ns / render:.0f}× "
                  f"| {cached_ns / render:.0f}× | {cached_ns / raw:.0f}× |")
    if compile_rows:
        print()
        print("| example | pav compile (`from_yaml`) | Jinja2 parse + compile all templates | ratio |")
        print("|---|--:|--:|--:|")
        for example, pav_us, jinja_us in compile_rows:
            print(f"| {example} | {pav_us:.1f} | {jinja_us:.0f} | {jinja_us / pav_us:.0f}× |")

    probe_differences, deliberate = check_probes(rust)
    total = len(rust.get("probes", []))
    print(f"\nSemantics probes: {total - len(probe_differences) - len(deliberate)} of {total} "
          f"agree (same output, or both fail); {len(deliberate)} differ on purpose.")
    if deliberate:
        print("\nDeliberate differences (not failures):\n", file=sys.stderr)
        for text in deliberate:
            print("  " + text, file=sys.stderr)
    mismatches += probe_differences
    if mismatches:
        print("\nOUTPUTS DIFFER between pav-templates and Jinja2:\n", file=sys.stderr)
        for m in mismatches:
            print("  " + m, file=sys.stderr)
        return 1
    print(f"All {len(rust['cases'])} example cases: pav-templates and Jinja2 outputs identical.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
