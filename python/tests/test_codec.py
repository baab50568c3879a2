import json

import pytest

from sglang.srt.kvctl.ack import Ack
from sglang.srt.kvctl.codec import CommandError, decode, to_int64


def test_int64_literals_exact_over_whole_range():
    body = '{"type":"Cache","block_hashes":[-9223372036854775808,9223372036854775807,-6917529027641081856],"pin":true}'
    cmd = decode(body)
    assert cmd.fields["block_hashes"] == [-(2**63), 2**63 - 1, -6917529027641081856]


def test_decimal_strings_and_uint64_are_normalised():
    cmd = decode({"type": "Cache", "block_hashes": ["15310707395893867146", "-5", 18446744073709551615], "pin": False})
    assert cmd.fields["block_hashes"] == [15310707395893867146 - 2**64, -5, -1]


@pytest.mark.parametrize("bad", [2**64, -(2**63) - 1, "12x", True, 1.5])
def test_out_of_range_or_mistyped_is_rejected_naming_the_field(bad):
    with pytest.raises(CommandError) as e:
        decode({"type": "Cache", "block_hashes": [1, bad], "pin": True})
    assert e.value.field == "block_hashes[1]"


def test_envelope_and_errors():
    cmd = decode(json.dumps({"version": 1, "id": "abc", "issued_at_ms": 5,
                             "command": {"type": "Cache", "block_hashes": [1], "pin": True, "ttl_seconds": 30}}))
    assert (cmd.id, cmd.type, cmd.fields["ttl_seconds"]) == ("abc", "Cache", 30)
    for body, field in [("{", "body"), ({"version": 2, "command": {}}, "version"),
                        ({"type": "Nope"}, "type"), ({"type": "Cache", "block_hashes": [1]}, "pin"),
                        ({"type": "Cache", "pin": True}, "block_hashes"),
                        ({"type": "Cache", "block_hashes": [0] * 65537, "pin": True}, "block_hashes")]:
        with pytest.raises(CommandError) as e:
            decode(body)
        assert e.value.field == field


def test_to_int64_direct():
    assert to_int64("  42 ", "f") == 42


def test_ack_shape_matches_commands_md():
    d = Ack(type="Cache", status="partial").to_dict()
    assert list(d) == ["type", "status", "id", "worker_id", "requested", "affected", "skipped",
                       "missing", "reason", "tiers", "lease", "epoch", "elapsed_us"]
    with pytest.raises(ValueError):
        Ack(type="Cache", status="weird")


from hypothesis import given, strategies as st


@given(st.integers(min_value=-(2**63), max_value=2**64 - 1))
def test_every_int64_or_uint64_maps_to_the_same_64_bits(v):
    out = to_int64(v, "h")
    assert -(2**63) <= out < 2**63 and out % 2**64 == v % 2**64
    assert decode(json.dumps({"type": "Cache", "block_hashes": [str(v)], "pin": True})).fields["block_hashes"] == [out]
