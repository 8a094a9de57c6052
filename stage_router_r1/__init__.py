"""Router-R1 (LLM routing as the search action): agent entry file, data preparation, rehearsal pool."""
