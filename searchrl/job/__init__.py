"""Submitting a stage to Ray: the plan, its runtime_env and upload, the preflight, the stage switch and the SFT
job."""
