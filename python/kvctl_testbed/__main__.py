"""`python -m kvctl_testbed serve --options '<json>'`: starts a real patched SGLang server
(server.start_server; option names are ServerOptions' fields), prints one JSON line on stdout
(`{"sglang_server":"ready",...ServerInfo}` or `{"sglang_server":"failed","error":...}`), then
keeps it running until stdin closes or SIGTERM/SIGINT arrives, and stops its process group.

`python -m kvctl_testbed model` builds (or finds) the tiny model and prints its directory."""
from __future__ import annotations

import argparse
import json
import signal
import sys
import threading

from . import server, tiny_model


def _serve(options: dict) -> int:
    try:
        s = server.start_server(server.ServerOptions(**options))
    except server.ServerStartError as e:
        print(json.dumps({"sglang_server": "failed", "error": str(e)}), flush=True)
        return 1
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())

    def watch_stdin() -> None:
        try:
            while sys.stdin.buffer.read(4096):
                pass
        except (OSError, ValueError):
            pass
        done.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    print(server.info_json(s), flush=True)
    while not done.wait(0.5):
        if not s.alive():
            print(json.dumps({"sglang_server": "exited", "status": s.proc.returncode}), flush=True)
            s.stop()
            return 1
    s.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kvctl_testbed")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sp = sub.add_parser("serve")
    sp.add_argument("--options", default="{}", help="JSON object of ServerOptions fields")
    sub.add_parser("model")
    a = ap.parse_args(argv)
    if a.cmd == "model":
        print(json.dumps({"model": tiny_model.ensure_model(), "note": tiny_model.MODEL_NOTE}))
        return 0
    return _serve(json.loads(a.options))


if __name__ == "__main__":
    sys.exit(main())
