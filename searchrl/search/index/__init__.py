"""An index directory: corpus readers, the passage store, embedding shards, FAISS types, building and importing."""
