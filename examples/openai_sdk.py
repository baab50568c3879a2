"""The kvctl gateway with the official OpenAI Python SDK: a streamed answer, a tool call and the
follow-up turn carrying its result, and how much of each prompt the worker's cache served
(usage.prompt_tokens_details.cached_tokens; the workers run with --enable-cache-report).

    python examples/openai_sdk.py --base-url http://127.0.0.1:8080/v1

One JSON line per step. The x-session-id header keeps the conversation on one worker.
"""

import argparse
import json

from openai import OpenAI

SYSTEM = "You are the assistant of a small travel desk. Answer in one short sentence. " * 6
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 12}},
                "required": ["city"],
            },
        },
    }
]


def get_weather(city):
    return {"city": city, "sky": "clear", "celsius": 21}


def tool_calls_of(message):
    """(id, name, arguments) per call: parsed by the server's --tool-call-parser, or, on a server
    started without one, the JSON array the forced tool choice had the model write as content."""
    if message.tool_calls:
        return [(c.id, c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls]
    calls = json.loads(message.content or "[]")
    return [(f"call_{i}", c["name"], c.get("parameters") or c.get("arguments") or {}) for i, c in enumerate(calls)]


def stream_turn(client, model, messages):
    """One streamed answer: its text, and the usage the last chunk carries."""
    text, usage = "", None
    for chunk in client.chat.completions.create(
        model=model, messages=messages, max_tokens=16, temperature=0, stream=True, stream_options={"include_usage": True}
    ):
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
        usage = chunk.usage or usage
    return text, usage


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:8080/v1")
    ap.add_argument("--session", default="example-openai-python")
    args = ap.parse_args()
    client = OpenAI(base_url=args.base_url, api_key="none", default_headers={"x-session-id": args.session})
    model = client.models.list().data[0].id
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is the weather in Paris?"}]

    # 1. A streamed answer; the last chunk carries the usage.
    text, usage = stream_turn(client, model, messages)
    print(json.dumps({"step": "stream", "text": text, "cached_tokens": usage.prompt_tokens_details.cached_tokens}))

    # 2. The model calls the tool (forced, so even a small model does).
    r = client.chat.completions.create(
        model=model,
        messages=messages,
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=256,
        temperature=0,
    )
    calls = tool_calls_of(r.choices[0].message)
    cached = r.usage.prompt_tokens_details.cached_tokens
    print(json.dumps({"step": "tool_call", "calls": [[n, a] for _, n, a in calls], "cached_tokens": cached}))

    # 3. The follow-up turn carries the tool's result; streamed again.
    call_id, name, arguments = calls[0]
    assistant = {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
    messages += [
        {"role": "assistant", "content": None, "tool_calls": [assistant]},
        {"role": "tool", "tool_call_id": call_id, "content": json.dumps(get_weather(arguments.get("city", "")))},
    ]
    text, usage = stream_turn(client, model, messages)
    print(json.dumps({"step": "follow_up", "text": text, "cached_tokens": usage.prompt_tokens_details.cached_tokens}))


if __name__ == "__main__":
    main()
