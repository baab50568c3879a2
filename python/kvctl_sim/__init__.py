"""kvctl sim's Python side: the fleet of SGLang caches on one virtual clock, and its timing."""
