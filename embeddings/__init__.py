"""Local embeddings and the LanceDB vector index (never imports server/)."""
