"""Replays a Mooncake trace with NVIDIA Dynamo 1.6.1's own offline replay (its Rust trace reader,
mock engine and scheduler), for the trace-format tests: prints one JSON line per request as Dynamo
saw it (session, turn, arrival, end, lengths, tokens reused from its prefix cache).

Usage: python dynamo_replay.py DYNAMO_SITE TRACE TRACE_BLOCK_SIZE
"""

import json
import sys

sys.path.insert(0, sys.argv[1])
from dynamo.replay import run_trace_replay  # noqa: E402

report = run_trace_replay(
    sys.argv[2],
    trace_block_size=int(sys.argv[3]),
    trace_format="mooncake",
    # One worker with room for every block: what it reuses is what the trace shares.
    extra_engine_args={"engine": {"block_size": int(sys.argv[3]), "num_gpu_blocks": 1 << 20}},
    num_workers=1,
    replay_mode="offline",
    capture_per_request=True,
)
for r in report.per_request:
    keys = ["session_id", "turn_index", "arrival_time_ms", "terminal_time_ms", "input_length", "output_length",
            "reused_input_tokens"]
    print(json.dumps({k: r[k] for k in keys}))
