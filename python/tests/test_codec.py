"""What the shared corpus (test_conformance.py) cannot say case by case: properties over the whole
int64 range, and the DP-rank merge of acks."""
import json

import pytest
from hypothesis import given, strategies as st

from sglang.srt.kvctl.ack import ACK_KEYS, Ack, contract_ack, decode_ack, encode_ack, merge_rank_acks
from sglang.srt.kvctl.codec import CommandError, decode


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_every_int64_survives_as_literal_and_as_string(v):
    for text in (str(v), json.dumps(str(v))):
        assert decode(f'{{"type":"Cache","block_hashes":[{text}],"pin":true}}').fields["block_hashes"] == [v]


@given(st.one_of(st.integers(min_value=2**63, max_value=2**70), st.integers(max_value=-(2**63) - 1, min_value=-(2**70))))
def test_everything_outside_int64_is_refused_naming_the_entry(v):
    with pytest.raises(CommandError) as e:
        decode(f'{{"type":"Cache","block_hashes":[0,{v}],"pin":true}}')
    assert e.value.field == "block_hashes[1]"


def test_ack_dict_and_bytes_follow_the_contract_order():
    d = Ack(type="Cache", status="partial").to_dict()
    assert list(d) == list(ACK_KEYS)
    assert list(json.loads(encode_ack(contract_ack(d, "w0")))) == list(ACK_KEYS)
    with pytest.raises(ValueError):
        Ack(type="Cache", status="weird")


def _rank(status, affected=0, missing=(), reason=None, tiers=None, **kw):
    return contract_ack({"id": "c1", "type": "Cache", "status": status, "requested": 3, "affected": affected,
                         "missing": list(missing), "reason": reason, "tiers": tiers or {}, **kw}, "w0")


def test_merge_of_one_rank_is_that_ack():
    a = _rank("applied", 3)
    assert merge_rank_acks([a]) is a


def test_merge_sums_counts_and_keeps_only_hashes_no_rank_holds():
    m = merge_rank_acks([_rank("partial", 1, [2, 3], tiers={"GPU": 1}), _rank("partial", 1, [1, 3], tiers={"GPU": 1, "CPU_PINNED": 1})])
    assert (m["status"], m["requested"], m["affected"], m["missing"]) == ("partial", 3, 2, [3])
    assert m["tiers"] == {"GPU": 2, "CPU_PINNED": 1}
    assert [r["status"] for r in m["ranks"]] == ["partial", "partial"]
    decode_ack(encode_ack(m))  # still a contract ack


def test_merge_of_complementary_ranks_is_applied():
    m = merge_rank_acks([_rank("partial", 2, [3]), _rank("noop", 0, [1, 2, 3])])
    assert (m["status"], m["missing"]) == ("partial", [3])
    m = merge_rank_acks([_rank("applied", 3), _rank("noop", 0, [1, 2, 3])])
    assert (m["status"], m["missing"], m["affected"]) == ("applied", [], 3)


def test_merge_keeps_every_error_and_says_which_rank():
    m = merge_rank_acks([_rank("applied", 3), _rank("error", 0, reason="failed midway: boom"), _rank("rejected", reason="lease_id: unknown")])
    assert m["status"] == "error"
    assert "rank 1: failed midway: boom" in m["reason"] and "rank 2: lease_id: unknown" in m["reason"]
    assert [r["status"] for r in m["ranks"]] == ["applied", "error", "rejected"]


def test_merge_of_agreeing_ranks_keeps_their_status_and_reason():
    m = merge_rank_acks([_rank("rejected", reason="x: bad"), _rank("rejected", reason="x: bad")])
    assert (m["status"], m["reason"]) == ("rejected", "x: bad")
