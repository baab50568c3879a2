"""BFCL multi-turn sessions for bench:agent, from the bfcl-eval wheel itself (PyPI).

Reads BFCL_v4_multi_turn_base (user turns, involved classes, initial state), its possible answers
(the ground-truth function calls of every turn) and the function docs of each class, and runs the
ground-truth calls through BFCL's own executable backends (func_source_code) so that every tool
result the bench feeds back is what the real tool returned. Prints one JSON object:
  {"system_prompt": str, "sessions": [{"id", "classes", "tools": [openai tool], "turns":
   [{"user": str, "calls": [{"name", "arguments": dict, "result": str}]}]}]}

Usage: python bfcl.py WHEEL_DIR N_SESSIONS SEED TOOLS_PER_CLASS
"""
from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import random
import sys


def openai_tool(doc: dict) -> dict:
    def fix(schema):
        # BFCL writes JSON Schema's "object" as Python's "dict" (and "tuple"/"float" likewise).
        if isinstance(schema, dict):
            out = {k: fix(v) for k, v in schema.items()}
            t = out.get("type")
            if t == "dict":
                out["type"] = "object"
            elif t == "tuple":
                out["type"] = "array"
            elif t == "float":
                out["type"] = "number"
            elif t == "any":
                out.pop("type")
            return out
        if isinstance(schema, list):
            return [fix(x) for x in schema]
        return schema

    return {"type": "function", "function": {"name": doc["name"], "description": doc["description"], "parameters": fix(doc["parameters"])}}


def parse_call(src: str, docs: dict[str, dict]) -> tuple[str, dict]:
    node = ast.parse(src, mode="eval").body
    assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name), src
    name = node.func.id
    args = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords}
    if node.args:
        # Positional ground truth: the parameters in the doc's declared order.
        order = list(docs[name]["parameters"].get("properties", {}).keys())
        for i, a in enumerate(node.args):
            args[order[i]] = ast.literal_eval(a)
    return name, args


def main() -> None:
    wheel, n, seed, per_class = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    sys.path.insert(0, wheel)
    os.environ.setdefault("BFCL_PROJECT_ROOT", os.path.join(wheel, ".bfcl-root"))
    from bfcl_eval.constants.default_prompts import PROMPT_STYLE_TEMPLATES
    from bfcl_eval.constants.executable_backend_config import MULTI_TURN_FUNC_DOC_FILE_MAPPING
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import execute_multi_turn_func_call

    data = os.path.join(wheel, "bfcl_eval", "data")
    entries = [json.loads(line) for line in open(os.path.join(data, "BFCL_v4_multi_turn_base.json"))]
    answers = {}
    for line in open(os.path.join(data, "possible_answer", "BFCL_v4_multi_turn_base.json")):
        a = json.loads(line)
        answers[a["id"]] = a["ground_truth"]
    docs_by_class = {}
    for cls, fname in MULTI_TURN_FUNC_DOC_FILE_MAPPING.items():
        path = os.path.join(data, "multi_turn_func_doc", fname)
        if os.path.exists(path):
            docs_by_class[cls] = [json.loads(line) for line in open(path)]
    chosen = random.Random(seed).sample(entries, n)
    # One tool list per class, shared by every session that uses the class (as an agent's fixed
    # tool set is): the functions the chosen sessions call most, up to per_class of them.
    calls_per_class: dict[str, dict[str, int]] = {}
    for e in chosen:
        for turn in answers[e["id"]]:
            for src in turn:
                name = src.split("(")[0]
                for cls in e["involved_classes"]:
                    if any(d["name"] == name for d in docs_by_class[cls]):
                        c = calls_per_class.setdefault(cls, {})
                        c[name] = c.get(name, 0) + 1
    tools_of = {}
    for cls, counts in calls_per_class.items():
        keep = sorted(counts, key=lambda k: (-counts[k], k))[:per_class]
        tools_of[cls] = [d for d in docs_by_class[cls] if d["name"] in sorted(keep)]
    style = PROMPT_STYLE_TEMPLATES["classic"]
    system = f"{style['persona']} {style['task']}\n\n{style['multiturn_behavior']}"
    sessions = []
    for e in chosen:
        classes = sorted(e["involved_classes"])
        docs = {d["name"]: d for cls in classes for d in tools_of.get(cls, [])}
        all_docs = {d["name"]: d for cls in classes for d in docs_by_class[cls]}
        turns = []
        for q, truth in zip(e["question"], answers[e["id"]]):
            user = " ".join(m["content"] for m in q if m.get("role") == "user")
            # The calls of this turn that the shared tool set offers (the others are dropped).
            kept = [src for src in truth if src.split("(")[0] in docs]
            with contextlib.redirect_stdout(io.StringIO()):
                results, _ = execute_multi_turn_func_call(kept, e["initial_config"], e["involved_classes"], "kvctl_bench", e["id"])
            calls = []
            for src, res in zip(kept, results):
                name, args = parse_call(src, all_docs)
                calls.append({"name": name, "arguments": args, "result": str(res)})
            turns.append({"user": user, "calls": calls})
        sessions.append({"id": e["id"], "classes": classes, "tools": [openai_tool(d) for d in docs.values()], "turns": turns})
    json.dump({"system_prompt": system, "sessions": sessions}, sys.stdout)


if __name__ == "__main__":
    main()
