"""POST /kvctl/v1/messages/tokenize: the prompt token ids of an Anthropic /v1/messages request,
rendered by the worker's own code exactly as /v1/messages will serve it (SGLang's Anthropic ->
chat conversion, then the chat template), so a router learns them from the worker instead of
running a second tokenizer. SGLang 0.5.23 answers /v1/messages without token ids, its
/v1/tokenize does not read Anthropic messages, and /v1/messages/count_tokens returns a count
only; this is count_tokens returning the ids. Registered with the kvctl routes (only while kvctl
is on), under SGLang's ordinary API-key rule, like /v1/tokenize."""
from http import HTTPStatus
from typing import Any

PATH = "/kvctl/v1/messages/tokenize"


def _error(message: str) -> Any:
    from fastapi.responses import JSONResponse

    return JSONResponse({"type": "error", "error": {"type": "invalid_request_error", "message": message}},
                        status_code=HTTPStatus.BAD_REQUEST)


def register(app: Any) -> None:
    # No postponed annotations in this module: FastAPI reads `request: Request` at registration
    # to know it wants the request object, not a query parameter.
    from fastapi import Request
    from fastapi.responses import JSONResponse

    async def messages_tokenize(request: Request):
        from sglang.srt.entrypoints.anthropic.protocol import AnthropicMessagesRequest

        serving = getattr(request.app.state, "anthropic_serving", None)
        if serving is None:
            return _error("this server does not serve /v1/messages")
        try:
            body = await request.json()
            req = AnthropicMessagesRequest.model_validate(body)
            chat = serving._convert_to_chat_completion_request(req)
            chat_serving = serving.openai_serving_chat
            processed = chat_serving._process_messages(chat, chat_serving.tokenizer_manager.model_config.is_multimodal)
        except Exception as e:  # a request /v1/messages would refuse too: say why
            return _error(f"{type(e).__name__}: {e}")
        ids = processed.prompt_ids
        if not isinstance(ids, list):  # multimodal: the rendered text, tokenized as count_tokens does
            ids = chat_serving.tokenizer_manager.tokenizer.encode(ids)
        return JSONResponse({"tokens": [int(t) for t in ids], "count": len(ids)})

    app.add_api_route(PATH, messages_tokenize, methods=["POST"])
