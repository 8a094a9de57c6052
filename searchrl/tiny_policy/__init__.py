"""The tiny policy of the CPU runs: its tokenizer and model built from a config, and its supervised warm
start."""
