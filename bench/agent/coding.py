"""Coding-agent sessions for bench:agent, in the shape of SWE-bench agent runs.

The harness is mini-swe-agent's own (PyPI `mini-swe-agent`, the SWE-bench reference agent): its
SWE-bench system prompt and task template (config/benchmarks/swebench.yaml), its one `bash` tool
schema (models/utils/actions_toolcall.py) and its observation template, which renders every tool
result. The repository the agent works on is the Python standard library of the interpreter that
runs this script (real code, the same bytes for every configuration); every read command (ls, grep,
sed -n, wc) is run there for real and its real output fed back; edits are not applied (their
result is the empty output of a successful command). The task statement names a real function of
the library and quotes its real docstring; no SWE-bench issue text ships in a registry package.

The shape (steps per session, the phases of a run, how much each read returns) follows the
published statistics cited in bench/agent/README.md; STEPS_MEDIAN and READ_LINES scale it, so a
smoke run stays seconds long. Prints one JSON object, as bfcl.py does:
  {"system_prompt": str, "sessions": [{"id", "classes", "tools": [openai tool], "turns":
   [{"user": str, "calls": [{"name", "arguments": dict, "result": str}]}]}]}

Usage: python coding.py WHEEL_DIR N_SESSIONS SEED STEPS_MEDIAN READ_LINES
"""
from __future__ import annotations

import ast
import json
import math
import os
import random
import re
import subprocess
import sys
import sysconfig

import jinja2
import yaml

# Packages of the standard library the tasks are drawn from (those present are used).
PACKAGES = ["json", "email", "http", "logging", "urllib", "xml/etree", "importlib", "asyncio", "concurrent/futures", "unittest", "collections", "sqlite3", "html", "wsgiref"]

FOLLOW_UPS = [
    "The checks still fail when the input is empty; handle that case as well and run them again.",
    "Please also keep the docstring in line with the new behaviour, then verify once more.",
    "Look again at the callers of this function: do any of them depend on the old behaviour?",
    "Run the checks once more and tell me what changed, file by file.",
]


def harness(wheel_dir: str) -> tuple[str, str, str, dict]:
    """mini-swe-agent's SWE-bench templates and its bash tool schema, read from the wheel."""
    sys.path.insert(0, wheel_dir)
    cfg = yaml.safe_load(open(os.path.join(wheel_dir, "minisweagent", "config", "benchmarks", "swebench.yaml")))
    src = open(os.path.join(wheel_dir, "minisweagent", "models", "utils", "actions_toolcall.py")).read()
    tree = ast.parse(src)
    tool = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "BASH_TOOL" for t in n.targets))
    return cfg["agent"]["system_template"].strip(), cfg["agent"]["instance_template"], cfg["model"]["observation_template"], tool


def functions(root: str, pkg: str) -> list[tuple[str, str, int, int, str]]:
    """(relative path, qualified name, first line, last line, docstring) of documented functions."""
    out = []
    base = os.path.join(root, pkg)
    for dirpath, _, files in sorted(os.walk(base)):
        if "test" in dirpath:
            continue
        for f in sorted(files):
            if not f.endswith(".py"):
                continue
            path = os.path.join(dirpath, f)
            try:
                tree = ast.parse(open(path, encoding="utf-8").read())
            except (SyntaxError, UnicodeDecodeError):
                continue
            rel = os.path.relpath(path, root)
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    for m in node.body:
                        if isinstance(m, ast.FunctionDef) and ast.get_docstring(m) and not m.name.startswith("_"):
                            out.append((rel, f"{node.name}.{m.name}", m.lineno, m.end_lineno or m.lineno, ast.get_docstring(m)))
            for node in tree.body:
                if isinstance(node, ast.FunctionDef) and ast.get_docstring(node) and not node.name.startswith("_"):
                    out.append((rel, node.name, node.lineno, node.end_lineno or node.lineno, ast.get_docstring(node)))
    return out


def run(cmd: str, root: str) -> tuple[int, str]:
    p = subprocess.run(["bash", "-c", cmd], cwd=root, capture_output=True, text=True, timeout=30, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"})
    return p.returncode, (p.stdout + p.stderr)


def plan_commands(r: random.Random, root: str, rel: str, qual: str, lo: int, hi: int, steps: int, read_lines: int) -> list[tuple[str, bool]]:
    """A run's commands in SWE-agent's phases: locate, read, reproduce, edit, verify (edit/verify
    rounds), each (command, executed?)."""
    name = qual.split(".")[-1]
    pkg_dir = os.path.dirname(rel) or "."
    module = rel[:-3].replace("/", ".").removesuffix(".__init__")
    n_lines = sum(1 for _ in open(os.path.join(root, rel), encoding="utf-8"))
    cmds: list[tuple[str, bool]] = [(f"ls -la {pkg_dir}", True), (f"grep -rn 'def {name}' {pkg_dir} | head -20", True)]
    start = max(1, lo - read_lines // 4)
    cmds.append((f"sed -n '{start},{start + read_lines - 1}p' {rel}", True))
    check = f"python3 -c \"import ast, sys; ast.parse(open('{rel}').read()); print('{module}: syntax ok')\""
    while len(cmds) < steps:
        x = r.random()
        if x < 0.45:
            a = r.randint(1, max(1, n_lines - read_lines))
            cmds.append((f"sed -n '{a},{a + read_lines - 1}p' {rel}", True))
        elif x < 0.6:
            word = r.choice([name, "return", "raise", "self", "import", "def "])
            cmds.append((f"grep -n '{word}' {rel} | head -{max(5, read_lines // 2)}", True))
        elif x < 0.7:
            cmds.append((f"grep -rln '{name}' {pkg_dir} | head -20", True))
        elif x < 0.85:
            line = r.randint(lo, max(lo, hi))
            cmds.append((f"sed -i '{line}s/$/  # checked/' {rel}", False))
        else:
            cmds.append((check, True))
    cmds.append((f"git diff -- {rel} > patch.txt", False))
    return cmds[:steps] if steps >= 4 else cmds[:4]


def main() -> None:
    wheel, n, seed, steps_median, read_lines = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
    system, instance, observation, tool = harness(wheel)
    obs = jinja2.Template(observation)
    task_tpl = jinja2.Template(instance)
    root = sysconfig.get_paths()["stdlib"]
    r = random.Random(seed)
    pool = [f for pkg in PACKAGES if os.path.isdir(os.path.join(root, pkg)) for f in functions(root, pkg)]
    if not pool:
        raise SystemExit(f"coding.py: no documented function found under {root}")
    sessions = []
    for i in range(n):
        rel, qual, lo, hi, doc = r.choice(pool)
        # Steps per run: lognormal around the median (sigma 0.5), clamped to [median/3, 3 x median].
        steps = int(round(min(3 * steps_median, max(steps_median / 3, steps_median * math.exp(0.5 * r.gauss(0, 1))))))
        cmds = plan_commands(r, root, rel, qual, lo, hi, max(4, steps), read_lines)
        calls = []
        for cmd, execute in cmds:
            code, out = run(cmd, root) if execute else (0, "")
            calls.append({"name": "bash", "arguments": {"command": cmd}, "result": obs.render(output={"returncode": code, "output": out, "exception_info": ""}).strip()})
        task = f"`{qual}` in `{rel}` does not behave as its documentation says for some inputs. Its documentation reads:\n\n{doc}\n\nMake the implementation match the documentation."
        # One task, then follow-up requests after a human gap (half the sessions one, a fifth two).
        n_turns = 1 + (r.random() < 0.5) + (r.random() < 0.2)
        cut = [0]
        for k in range(1, n_turns):
            cut.append(max(cut[-1] + 1, int(len(calls) * (0.6 + 0.4 * (k - 1) / max(1, n_turns - 1)))))
        cut.append(len(calls))
        users = [task_tpl.render(task=task)] + r.sample(FOLLOW_UPS, n_turns - 1)
        turns = [{"user": users[k], "calls": calls[cut[k] : cut[k + 1]]} for k in range(n_turns)]
        sessions.append({"id": f"coding_{i}_{re.sub(r'[^a-z0-9]+', '_', qual.lower())}", "classes": ["bash"], "tools": [tool], "turns": turns})
    json.dump({"system_prompt": system, "sessions": sessions}, sys.stdout)


if __name__ == "__main__":
    main()
