"""The kvctl gateway with the official Anthropic Python SDK: a streamed answer (messages.stream),
a tool call and the follow-up turn carrying its result, the prompt's token count, and how much of
each prompt the worker's cache served (usage.cache_read_input_tokens).

    python examples/anthropic_sdk.py --base-url http://127.0.0.1:8080

One JSON line per step. The x-session-id header keeps the conversation on one worker.
"""

import argparse
import json

from anthropic import Anthropic

SYSTEM = [
    {
        "type": "text",
        "text": "You are the assistant of a small travel desk. Answer in one short sentence. " * 6,
        "cache_control": {"type": "ephemeral"},
    }
]
TOOLS = [
    {
        "name": "get_weather",
        "description": "Current weather in a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"]},
    }
]


def get_weather(city):
    return {"city": city, "sky": "clear", "celsius": 21}


def tool_uses_of(message):
    """(id, name, input) per call: tool_use blocks from the server's --tool-call-parser, or, on a
    server started without one, the JSON array the forced tool choice had the model write as text."""
    uses = [(b.id, b.name, b.input) for b in message.content if b.type == "tool_use"]
    if uses:
        return uses
    text = "".join(b.text for b in message.content if b.type == "text")
    return [(f"toolu_{i}", c["name"], c.get("parameters") or c.get("input") or {}) for i, c in enumerate(json.loads(text or "[]"))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:8080")
    ap.add_argument("--model", default="default")
    ap.add_argument("--session", default="example-anthropic-python")
    args = ap.parse_args()
    client = Anthropic(base_url=args.base_url, api_key="none", default_headers={"x-session-id": args.session})
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    # Greedy decoding (SGLang reads temperature; this SDK release has no parameter for it).
    common = {"model": args.model, "system": SYSTEM, "extra_body": {"temperature": 0}}

    count = client.messages.count_tokens(model=args.model, system=SYSTEM, messages=messages)
    print(json.dumps({"step": "count_tokens", "input_tokens": count.input_tokens}))

    # 1. A streamed answer.
    with client.messages.stream(messages=messages, max_tokens=16, **common) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    print(json.dumps({"step": "stream", "text": text, "cached_tokens": final.usage.cache_read_input_tokens}))

    # 2. The model calls the tool (forced, so even a small model does).
    r = client.messages.create(messages=messages, tools=TOOLS, tool_choice={"type": "tool", "name": "get_weather"}, max_tokens=256, **common)
    uses = tool_uses_of(r)
    print(json.dumps({"step": "tool_call", "calls": [[n, i] for _, n, i in uses], "cached_tokens": r.usage.cache_read_input_tokens}))

    # 3. The follow-up turn carries the tool's result; streamed again.
    use_id, name, tool_input = uses[0]
    messages += [
        {"role": "assistant", "content": [{"type": "tool_use", "id": use_id, "name": name, "input": tool_input}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use_id, "content": json.dumps(get_weather(tool_input.get("city", "")))}]},
    ]
    with client.messages.stream(messages=messages, tools=TOOLS, max_tokens=16, **common) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    print(json.dumps({"step": "follow_up", "text": text, "cached_tokens": final.usage.cache_read_input_tokens}))


if __name__ == "__main__":
    main()
