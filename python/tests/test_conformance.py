"""The shared conformance corpus (test/fixtures/protocol/, written by its generate.mjs) run against
the Python codec; test/protocol-conformance.test.ts runs the same files against the TypeScript one."""
import base64
import json
import os

import pytest

from sglang.srt.kvctl.ack import decode_ack, encode_ack
from sglang.srt.kvctl.codec import CommandError, decode, normalised

_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "test", "fixtures", "protocol")


def _load(name):
    with open(os.path.join(_DIR, name), encoding="utf-8") as f:
        return json.load(f)["cases"]


COMMANDS = _load("commands.json")
ACKS = _load("acks.json")


def _expand(text, repeat):
    for marker, item, count, sep in repeat or []:
        text = text.replace(marker, sep.join([item] * count))
    return text


def _body(case):
    if "body_base64" in case:
        return base64.b64decode(case["body_base64"])
    return _expand(case["body"], case.get("repeat"))


def _canonical(value) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def test_corpus_is_large_enough_to_mean_something():
    assert len(COMMANDS) + len(ACKS) >= 150
    assert sum(c["valid"] for c in COMMANDS) > 50 and sum(not c["valid"] for c in COMMANDS) > 100


@pytest.mark.parametrize("case", COMMANDS, ids=[c["name"] for c in COMMANDS])
def test_command(case):
    body = _body(case)
    if case["valid"]:
        cmd = decode(body)
        assert _canonical(normalised(cmd)) == _expand(case["normalised"], case.get("repeat"))
    else:
        with pytest.raises(CommandError) as e:
            decode(body)
        assert e.value.field == case["field"]


@pytest.mark.parametrize("case", ACKS, ids=[c["name"] for c in ACKS])
def test_ack(case):
    if case["valid"]:
        assert encode_ack(decode_ack(case["body"])).decode("utf-8") == case["canonical"]
    else:
        with pytest.raises(CommandError) as e:
            decode_ack(case["body"])
        assert e.value.field == case["field"]
