"""kvctl's real-server test bed: the tiny local model and the launcher of a patched SGLang server
on CPU (see server.py). Test and demo tooling, not part of the patch series."""
