// The kvctl gateway with the official OpenAI Node SDK: a streamed answer, a tool call and the
// follow-up turn carrying its result, and how much of each prompt the worker's cache served
// (usage.prompt_tokens_details.cached_tokens; the workers run with --enable-cache-report).
//
//   node examples/openai-sdk.mjs --base-url http://127.0.0.1:8080/v1
//
// One JSON line per step. The x-session-id header keeps the conversation on one worker.
import { parseArgs } from "node:util";
import OpenAI from "openai";

const { values } = parseArgs({ options: { "base-url": { type: "string", default: "http://127.0.0.1:8080/v1" }, session: { type: "string", default: "example-openai-node" } } });
const client = new OpenAI({ baseURL: values["base-url"], apiKey: "none", defaultHeaders: { "x-session-id": values.session } });

const SYSTEM = "You are the assistant of a small travel desk. Answer in one short sentence. ".repeat(6);
const TOOLS = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "Current weather in a city",
      parameters: { type: "object", properties: { city: { type: "string", maxLength: 12 } }, required: ["city"] },
    },
  },
];
const getWeather = (city) => ({ city, sky: "clear", celsius: 21 });

// [id, name, arguments] per call: parsed by the server's --tool-call-parser, or, on a server started
// without one, the JSON array the forced tool choice had the model write as content.
function toolCallsOf(message) {
  if (message.tool_calls?.length) return message.tool_calls.map((c) => [c.id, c.function.name, JSON.parse(c.function.arguments)]);
  return JSON.parse(message.content || "[]").map((c, i) => [`call_${i}`, c.name, c.parameters ?? c.arguments ?? {}]);
}

async function streamed(model, messages) {
  let text = "";
  let usage = null;
  const stream = await client.chat.completions.create({ model, messages, max_tokens: 16, temperature: 0, stream: true, stream_options: { include_usage: true } });
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content ?? "";
    usage = chunk.usage ?? usage;
  }
  return { text, cached_tokens: usage.prompt_tokens_details.cached_tokens };
}

const model = (await client.models.list()).data[0].id;
const messages = [
  { role: "system", content: SYSTEM },
  { role: "user", content: "What is the weather in Paris?" },
];

// 1. A streamed answer; the last chunk carries the usage.
console.log(JSON.stringify({ step: "stream", ...(await streamed(model, messages)) }));

// 2. The model calls the tool (forced, so even a small model does).
const r = await client.chat.completions.create({
  model,
  messages,
  tools: TOOLS,
  tool_choice: { type: "function", function: { name: "get_weather" } },
  max_tokens: 256,
  temperature: 0,
});
const calls = toolCallsOf(r.choices[0].message);
console.log(JSON.stringify({ step: "tool_call", calls: calls.map(([, n, a]) => [n, a]), cached_tokens: r.usage.prompt_tokens_details.cached_tokens }));

// 3. The follow-up turn carries the tool's result; streamed again.
const [callId, name, args] = calls[0];
messages.push(
  { role: "assistant", content: null, tool_calls: [{ id: callId, type: "function", function: { name, arguments: JSON.stringify(args) } }] },
  { role: "tool", tool_call_id: callId, content: JSON.stringify(getWeather(args.city ?? "")) },
);
console.log(JSON.stringify({ step: "follow_up", ...(await streamed(model, messages)) }));
