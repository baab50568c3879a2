"""The command families, one small handler each, over the shared state the cache's observer holds.

``kvctl_worker.handlers.CommandHandler`` decodes, dedupes, counts and routes each command to the
family that owns its type: pins (Cache), prune/think, leases (Pause, RenewLease, RevokeLease),
tools (ToolStart, ToolEnd), warm, inspect. A family sees the cache through one ``CommandContext``
and moves blocks between tiers through ``residency``.
"""
