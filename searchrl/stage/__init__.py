"""A training stage as configured: the stage and model configs, prompts and templates, algorithms, and
OpenRLHF's own flag parser."""
