"""A tiny random Llama with a byte-level BPE tokenizer trained on the spot: a model SGLang can load
and serve on CPU with no model hub. Built once and cached under a directory named by the content
hash of everything that shapes it (this file's source, the shape, the library versions).

    python -m kvctl_testbed.tiny_model [--cache-dir DIR]   # prints {"model": "<dir>"}

The weights are random (seeded): outputs are gibberish, but deterministic, which is all the tests
need (greedy output after a cache hit must equal a fresh prefill's).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEFAULT_CACHE = os.path.join(REPO, ".cache", "tiny-model")

SHAPE = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 1024,
    "max_position_embeddings": 4096,
    "seed": 20261123,
}
BOS, EOS, PAD = "<|bos|>", "<|eos|>", "<|pad|>"
SPECIAL = [BOS, EOS, PAD, "<|user|>", "<|assistant|>", "<|system|>", "<|tool|>", "<|end|>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
MODEL_NOTE = "tiny random Llama (hidden 64, 2 layers, byte-level BPE vocab 1024) built locally"


def _corpus() -> list[str]:
    # Enough varied text for ~760 merges: agent-ish words, digits, code-ish punctuation.
    import random

    rng = random.Random(SHAPE["seed"])
    words = ("the agent tool call result file read write search plan step cache block page token "
             "prefix host device pin lease prune think warm pause resume user system assistant "
             "json error ok value key list open close run test build model server request reply "
             "alpha beta gamma delta kv radix tree node hash event store remove clear").split()
    lines = []
    for _ in range(4000):
        n = rng.randint(3, 14)
        parts = [rng.choice(words) for _ in range(n)]
        if rng.random() < 0.3:
            parts.append(str(rng.randint(0, 99999)))
        if rng.random() < 0.2:
            parts.append("{" + f'"{rng.choice(words)}": {rng.randint(0, 999)}' + "}")
        lines.append(" ".join(parts) + rng.choice([".", "?", "!", ";", ":", ""]))
    return lines


def _versions() -> dict[str, str]:
    import tokenizers
    import torch
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__, "tokenizers": tokenizers.__version__}


def content_key() -> str:
    with open(__file__, "rb") as f:
        src = f.read()
    blob = json.dumps({"src": hashlib.sha256(src).hexdigest(), "shape": SHAPE, "versions": _versions()}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _build_into(out: str) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=SHAPE["vocab_size"], special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD,
                                   additional_special_tokens=SPECIAL[3:])
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)

    torch.manual_seed(SHAPE["seed"])
    cfg = LlamaConfig(
        vocab_size=len(fast), hidden_size=SHAPE["hidden_size"], intermediate_size=SHAPE["intermediate_size"],
        num_hidden_layers=SHAPE["num_hidden_layers"], num_attention_heads=SHAPE["num_attention_heads"],
        num_key_value_heads=SHAPE["num_key_value_heads"], max_position_embeddings=SHAPE["max_position_embeddings"],
        bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id,
        tie_word_embeddings=False, torch_dtype="float32",
    )
    model = LlamaForCausalLM(cfg)
    # Larger-than-default init so greedy decoding does not collapse onto one token.
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.2)
    model.save_pretrained(out, safe_serialization=True)
    with open(os.path.join(out, "kvctl-tiny-model.json"), "w") as f:
        json.dump({"note": MODEL_NOTE, "shape": SHAPE, "key": os.path.basename(out)}, f)


def ensure_model(cache_dir: str | None = None) -> str:
    """The model directory, built first if this content key has none yet (atomic rename)."""
    cache_dir = cache_dir or os.environ.get("KVCTL_TINY_MODEL_CACHE") or DEFAULT_CACHE
    final = os.path.join(cache_dir, content_key())
    if os.path.isfile(os.path.join(final, "kvctl-tiny-model.json")):
        return final
    os.makedirs(cache_dir, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".build-", dir=cache_dir)
    try:
        _build_into(tmp)
        try:
            os.rename(tmp, final)
        except OSError:  # another process won the race: keep theirs
            if not os.path.isfile(os.path.join(final, "kvctl-tiny-model.json")):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kvctl_testbed.tiny_model")
    ap.add_argument("--cache-dir", default=None)
    a = ap.parse_args(argv)
    print(json.dumps({"model": ensure_model(a.cache_dir), "note": MODEL_NOTE}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
