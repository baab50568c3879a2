"""kvctl on SGLang's Rust tree core (``RustUnifiedTreeCore``), through the adapter's own API.

``blocks`` the blocks the core holds, read from its KV events; ``nodes`` block hash -> node
handle through the core's read-only lookups; ``ops`` pins and holds (host or device locks);
``moves`` the tier moves of Pause, ToolStart, Prefetch and Warm; ``observer`` the object patch
0006 gives the core. Which commands run here and which need the Python core: ``cores.py``.
"""
