"""Integrations of moe_a2a with other libraries. Each submodule imports its library lazily
(importing moe_a2a.integrations imports none of them)."""
